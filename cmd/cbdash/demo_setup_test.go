package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/internal/web"
)

func TestDemoReusesItsTokensAcrossStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.Open(t, clocktest.Virtual())
	file := filepath.Join(t.TempDir(), "cbdash-demo.db.tokens")
	first, err := setupDemo(ctx, st, file, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := setupDemo(ctx, st, file, "")
	if err != nil {
		t.Fatal(err)
	}
	if first.agentToken != second.agentToken || first.apiToken != second.apiToken {
		t.Errorf("a second start minted new tokens: %+v then %+v", first, second)
	}
	// The operator's password is printed at every start while it is the
	// demo's; once changed, the banner says so.
	if first.password != demoOperator || second.password != demoOperator {
		t.Errorf("operator password in the banner: %q then %q, want %q both times", first.password, second.password, demoOperator)
	}
	hash, err := web.HashPassword("changed-by-hand")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetPassword(ctx, demoOperator, hash); err != nil {
		t.Fatal(err)
	}
	if changed, err := setupDemo(ctx, st, file, ""); err != nil || changed.password != "(as set before)" {
		t.Errorf("after a password change: %q, %v; want (as set before)", changed.password, err)
	}
	if toks, err := st.AgentTokens(ctx); err != nil || len(toks) != 1 {
		t.Errorf("agent tokens after two starts: %d (%v), want 1", len(toks), err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens file: %v %v, want mode 0600", fi, err)
	}
	// A token revoked meanwhile is replaced, not reused.
	if n, err := st.RevokeUserTokens(ctx, "test", demoOperator); err != nil || n != 1 {
		t.Fatalf("revoke: %d, %v", n, err)
	}
	third, err := setupDemo(ctx, st, file, "")
	if err != nil {
		t.Fatal(err)
	}
	if third.apiToken == second.apiToken || third.agentToken != second.agentToken {
		t.Errorf("after revoking the API token: %+v, want a new API token and the same agent token", third)
	}
}

// The demo's tokens file holds an agent token and an operator's API
// token: mode 0600 even over a file that was readable by others (an older
// cbdash wrote it with the umask's mode), and git ignores it wherever the
// demo puts it (issue 27, item 11).
func TestDemoTokensFileIsPrivateAndIgnored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.Open(t, clocktest.Virtual())
	dir := t.TempDir()
	file := filepath.Join(dir, "cbdash-demo.db.tokens")
	if err := os.WriteFile(file, []byte(`{"agent":"at-old","api":"ut-old"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if _, err := setupDemo(ctx, st, file, ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens file written over a 0644 one has mode %v, want 0600", fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(file); strings.Contains(string(data), "old") {
		t.Errorf("the tokens file still holds the tokens the store refused: %s", data)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left beside the tokens file: %v", left)
	}

	ignore, err := os.ReadFile(filepath.Join("..", "..", ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"./cbdash-demo.db", "cbdash-demo.db", "/var/tmp/d.db", "postgres://cbdash:pw@127.0.0.1:5432/cbdash", "postgres://127.0.0.1/"} {
		name := filepath.Base(demoTokensFile(db))
		ignored := false
		for _, line := range strings.Split(string(ignore), "\n") {
			pat := strings.TrimSpace(line)
			if pat == "" || strings.HasPrefix(pat, "#") || strings.Contains(strings.Trim(pat, "/"), "/") {
				continue
			}
			if ok, _ := filepath.Match(strings.Trim(pat, "/"), name); ok {
				ignored = true
			}
		}
		if !ignored {
			t.Errorf(".gitignore does not name %s, the demo's tokens file for --db %s", name, db)
		}
	}
}

func TestDemoStaysOnLoopbackUnlessPublic(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:0": true, "[::1]:9": true, "0.0.0.0:8080": false, ":8080": false, "10.1.2.3:80": false} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
	code, _, stderr := cli(t, nil, "demo", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "d.db"))
	if code != 2 || !strings.Contains(stderr, "--public") || !strings.Contains(stderr, "beyond loopback") {
		t.Errorf("demo --addr 0.0.0.0:0: exit %d, stderr %q; want 2 naming --public", code, stderr)
	}
}
