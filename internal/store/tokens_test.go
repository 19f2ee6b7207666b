package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
)

func TestAgentTokensAreCheckedAndStoredHashed(t *testing.T) {
	t.Parallel()
	now := t0
	s, path := openStore(t, store.Options{Clock: clockAt(now)})
	ctx := context.Background()
	scoped, err := s.CreateAgentToken(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	anyService, err := s.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, token, service string
		err                  error
	}{
		{"scoped", scoped, "pay", nil},
		{"any service", anyService, "", nil},
		{"unknown", scoped + "x", "", cbdash.ErrUnauthorized},
		{"empty", "", "", cbdash.ErrUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc, err := s.CheckAgentToken(ctx, c.token)
			if !errors.Is(err, c.err) || svc != c.service {
				t.Fatalf("CheckAgentToken = %q, %v; want %q, %v", svc, err, c.service, c.err)
			}
		})
	}
	// Only hashes are on disk.
	db := rawDB(t, path)
	rows, err := db.Query("SELECT hash, service FROM agent_tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h []byte
		var svc string
		if err := rows.Scan(&h, &svc); err != nil {
			t.Fatal(err)
		}
		if len(h) != 32 || bytes.Contains(h, []byte(scoped)) || strings.Contains(svc, "cbdash_at_") {
			t.Fatalf("stored token row (%x, %q) is not a bare sha256", h, svc)
		}
	}
	// last_used is written in the background; poll for it.
	var used int64
	eventually.True(t, "last_used at t0", func() bool {
		if err := db.QueryRow("SELECT max(last_used) FROM agent_tokens").Scan(&used); err != nil {
			t.Fatal(err)
		}
		return used == t0.UnixMilli()
	})
}

func TestAgentTokensCanBeListedAndRevoked(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{Clock: clockAt(t0)})
	ctx := context.Background()
	tok, err := s.CreateAgentToken(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.AgentTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Service != "pay" || !list[0].CreatedAt.Equal(t0) || len(list[0].ID) != 16 || strings.Contains(tok, list[0].ID) {
		t.Fatalf("AgentTokens = %+v", list)
	}
	if err := s.RevokeAgentToken(ctx, "test", list[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckAgentToken(ctx, tok); !errors.Is(err, cbdash.ErrUnauthorized) {
		t.Fatalf("revoked token checks as %v, want ErrUnauthorized", err)
	}
	if err := s.RevokeAgentToken(ctx, "test", list[0].ID); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("second revoke: %v, want ErrNotFound", err)
	}
}

// TestSecretsAreRandTextAndOldOnesStillVerify checks the shape of the
// secrets handed out (a prefix and crypto/rand.Text: 26 characters of
// A-Z and 2-7) and that secrets of the shape made before (the prefix and
// 43 characters of base64url) still verify: only their SHA-256 is looked
// up.
func TestSecretsAreRandTextAndOldOnesStillVerify(t *testing.T) {
	s, path := openStore(t, store.Options{Clock: clockAt(t0)})
	ctx := context.Background()
	u, err := s.CreateUser(ctx, "ada", cbdash.RoleOperator, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := s.CreateAgentToken(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	session, err := s.CreateSession(ctx, u.ID, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	api, err := s.CreateUserToken(ctx, u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	shape := regexp.MustCompile(`^cbdash_(at|s|ut)_[A-Z2-7]{26}$`)
	for _, tok := range []string{agent, session, api} {
		if !shape.MatchString(tok) {
			t.Errorf("secret %q does not match %s", tok, shape)
		}
	}
	// Give each row the hash of a secret of the old shape.
	db := rawDB(t, path)
	old := map[string]string{
		"agent_tokens": "cbdash_at_" + strings.Repeat("Ab-_", 10) + "xyz",
		"sessions":     "cbdash_s_" + strings.Repeat("Cd-_", 10) + "xyz",
		"user_tokens":  "cbdash_ut_" + strings.Repeat("Ef-_", 10) + "xyz",
	}
	for table, tok := range old {
		sum := sha256.Sum256([]byte(tok))
		if _, err := db.Exec("UPDATE "+table+" SET hash = $1", sum[:]); err != nil {
			t.Fatal(err)
		}
	}
	if svc, err := s.CheckAgentToken(ctx, old["agent_tokens"]); err != nil || svc != "pay" {
		t.Errorf("CheckAgentToken(old shape) = %q, %v; want pay", svc, err)
	}
	if got, err := s.SessionUser(ctx, old["sessions"], t0); err != nil || got.ID != u.ID {
		t.Errorf("SessionUser(old shape) = %+v, %v; want user %d", got, err, u.ID)
	}
	if got, err := s.UserByToken(ctx, old["user_tokens"]); err != nil || got.ID != u.ID {
		t.Errorf("UserByToken(old shape) = %+v, %v; want user %d", got, err, u.ID)
	}
}
