package main

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
)

func TestAccountAndTokenLifecycleOnTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "cbdash.db")
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	must := func(want string, args ...string) string {
		t.Helper()
		code, out, stderr := cli(t, nil, append(args, "--db", db)...)
		if code != 0 || !strings.Contains(out+stderr, want) {
			t.Fatalf("%v: exit %d, out %q, err %q; want %q", args, code, out, stderr, want)
		}
		return out
	}
	must("added ada (admin)", "user", "add", "ada", "--role", "admin", "--password", "ada-password")
	must("added bob (operator)", "user", "add", "bob", "--role", "operator", "--password", "bob-password")
	apiTok := strings.TrimSpace(must("cbdash_ut_", "token", "create", "--user", "bob", "--name", "laptop", "--expires", "30d"))
	agentTok := strings.TrimSpace(must("cbdash_at_", "token", "create", "--service", "checkout"))

	list := must("laptop", "token", "list")
	apiRef := regexp.MustCompile(`ut-\d+`).FindString(list)
	agentRef := store.AgentTokenRef(store.AgentTokenID(agentTok))
	if apiRef == "" || !strings.Contains(list, agentRef) || !strings.Contains(list, "service checkout") {
		t.Fatalf("token list lacks the tokens:\n%s", list)
	}
	must("bob is now viewer", "user", "role", "bob", "viewer")
	must("disabled bob", "user", "disable", "bob")
	if out := must("bob", "user", "list"); !regexp.MustCompile(`bob\s+viewer\s+disabled`).MatchString(out) {
		t.Errorf("user list does not show bob disabled:\n%s", out)
	}
	must("enabled bob", "user", "enable", "bob")
	if code, _, stderr := cli(t, nil, "user", "disable", "ada", "--db", db); code != 2 || !strings.Contains(stderr, "no enabled admin") {
		t.Errorf("disabling the last admin: exit %d, err %q", code, stderr)
	}
	must("still has 1 API tokens", "user", "passwd", "bob", "--password", "new-password")
	must("revoked 1 API tokens of bob", "user", "passwd", "bob", "--password", "newer-password", "--revoke-tokens")
	must("revoked "+agentRef, "token", "revoke", agentRef)
	if code, _, stderr := cli(t, nil, "token", "revoke", "nonsense", "--db", db); code != 2 || !strings.Contains(stderr, "ut-<n>") {
		t.Errorf("revoke with a bad reference: exit %d, err %q", code, stderr)
	}
	if code, _, stderr := cli(t, nil, "token", "revoke", apiRef, "--db", db); code != 1 || !strings.Contains(stderr, "no token") {
		t.Errorf("revoking a revoked token: exit %d, err %q", code, stderr)
	}
	must("deleted bob", "user", "delete", "bob")

	st, err = store.Open(ctx, db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.UserByToken(ctx, apiTok); !errors.Is(err, cbdash.ErrUnauthorized) {
		t.Errorf("bob's API token after --revoke-tokens: %v", err)
	}
	if _, err := st.CheckAgentToken(ctx, agentTok); !errors.Is(err, cbdash.ErrUnauthorized) {
		t.Errorf("revoked agent token: %v", err)
	}
	evs, err := st.AccountEvents(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Actor != "cli" {
			t.Errorf("event %+v: actor %q, want cli", e, e.Actor)
		}
		got = append(got, e.Action)
	}
	want := []string{"user delete", "agent token revoke", "user tokens revoke", "user passwd", "user passwd", "user enable",
		"user disable", "user role", "agent token create", "token create", "user add", "user add"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("account log:\n%q\nwant\n%q", got, want)
	}
}

func TestCleanEscapesTerminalControls(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"payments":               "payments",
		"\x1b[2J\x1b[Hpwned":     `\x1b[2J\x1b[Hpwned`,
		"a\rb\bc\u009bd":         `a\x0db\x08c\x9bd`,
		"evil\u202etxt.exe":      `evil\u202etxt.exe`,
		"bad\xffbyte":            `bad\ufffdbyte`,
		"ünïcode names are fine": "ünïcode names are fine",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}
