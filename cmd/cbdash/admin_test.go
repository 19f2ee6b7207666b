package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash/internal/store"
)

func TestUserAddAndTokenCreateOnTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "cbdash.db")
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, out, stderr := cli(t, nil, "user", "add", "bob", "--role", "operator", "--password", "correct horse", "--db", db)
	if code != 0 || !strings.Contains(out, "added bob (operator)") || strings.Contains(out, "password") {
		t.Fatalf("user add: exit %d, out %q, err %q", code, out, stderr)
	}
	code, _, stderr = cli(t, nil, "user", "add", "bob", "--db", db)
	if code != 1 || !strings.Contains(stderr, `user "bob" exists already`) {
		t.Fatalf("second user add: exit %d, err %q", code, stderr)
	}
	code, out, _ = cli(t, nil, "user", "add", "carol", "--db", db)
	if code != 0 || !strings.Contains(out, "with password ") {
		t.Fatalf("user add without --password: exit %d, out %q; want a printed random password", code, out)
	}
	code, out, stderr = cli(t, nil, "user", "passwd", "bob", "--password", "battery staple", "--db", db)
	if code != 0 || !strings.Contains(out, "set the password of bob") || strings.Contains(out, "staple") {
		t.Fatalf("user passwd: exit %d, out %q, err %q", code, out, stderr)
	}
	code, _, stderr = cli(t, nil, "user", "passwd", "nobody", "--db", db)
	if code != 1 || !strings.Contains(stderr, `no user "nobody"`) {
		t.Fatalf("user passwd for an unknown user: exit %d, err %q", code, stderr)
	}
	code, apiToken, stderr := cli(t, map[string]string{"CBDASH_DB": db}, "token", "create", "--user", "bob")
	if code != 0 {
		t.Fatalf("token create --user: exit %d, err %q", code, stderr)
	}
	code, agentToken, stderr := cli(t, nil, "token", "create", "--service", "checkout", "--db", db)
	if code != 0 {
		t.Fatalf("token create --service: exit %d, err %q", code, stderr)
	}
	code, _, stderr = cli(t, nil, "token", "create", "--user", "nobody", "--db", db)
	if code != 1 || !strings.Contains(stderr, `no user "nobody"`) {
		t.Fatalf("token for an unknown user: exit %d, err %q", code, stderr)
	}

	st, err = store.Open(ctx, db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, hash, err := st.UserByName(ctx, "bob"); err != nil || bcrypt.CompareHashAndPassword(hash, []byte("battery staple")) != nil {
		t.Errorf("bob's password is not the one user passwd set (%v)", err)
	}
	u, err := st.UserByToken(ctx, strings.TrimSpace(apiToken))
	if err != nil || u.Name != "bob" || u.Role != "operator" {
		t.Errorf("API token belongs to %+v (%v), want bob the operator", u, err)
	}
	svc, err := st.CheckAgentToken(ctx, strings.TrimSpace(agentToken))
	if err != nil || svc != "checkout" {
		t.Errorf("agent token is for %q (%v), want checkout", svc, err)
	}
}
