package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
)

func TestDemoReusesItsTokensAcrossStarts(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, clocktest.Virtual())
	file := filepath.Join(t.TempDir(), "cbdash-demo.db.tokens")
	first, err := setupDemo(ctx, st, file)
	if err != nil {
		t.Fatal(err)
	}
	second, err := setupDemo(ctx, st, file)
	if err != nil {
		t.Fatal(err)
	}
	if first.agentToken != second.agentToken || first.apiToken != second.apiToken {
		t.Errorf("a second start minted new tokens: %+v then %+v", first, second)
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
	third, err := setupDemo(ctx, st, file)
	if err != nil {
		t.Fatal(err)
	}
	if third.apiToken == second.apiToken || third.agentToken != second.agentToken {
		t.Errorf("after revoking the API token: %+v, want a new API token and the same agent token", third)
	}
}

func TestDemoStaysOnLoopbackUnlessPublic(t *testing.T) {
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
