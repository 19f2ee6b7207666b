package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
)

func TestUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s, _ := openStore(t, store.Options{Clock: clockAt(now)})

	t.Run("creates users and refuses duplicates and bad input", func(t *testing.T) {
		if n, err := s.CountUsers(ctx); err != nil || n != 0 {
			t.Fatalf("CountUsers = %d, %v; want 0", n, err)
		}
		u, err := s.CreateUser(ctx, "alice", cbdash.RoleOperator, []byte("hash-a"))
		if err != nil || u.ID == 0 || u.Name != "alice" || !u.CreatedAt.Equal(t0) {
			t.Fatalf("CreateUser = %+v, %v", u, err)
		}
		if _, err := s.CreateUser(ctx, "alice", cbdash.RoleViewer, []byte("x")); !errors.Is(err, cbdash.ErrConflict) {
			t.Fatalf("duplicate: %v, want ErrConflict", err)
		}
		for _, c := range []struct{ name, role string }{{"", cbdash.RoleViewer}, {"bob", "root"}} {
			if _, err := s.CreateUser(ctx, c.name, c.role, []byte("x")); !errors.Is(err, cbdash.ErrInvalid) {
				t.Errorf("CreateUser(%q, %q): %v, want ErrInvalid", c.name, c.role, err)
			}
		}
		got, hash, err := s.UserByName(ctx, "alice")
		if err != nil || got.ID != u.ID || got.Role != cbdash.RoleOperator || string(hash) != "hash-a" {
			t.Fatalf("UserByName = %+v %q %v", got, hash, err)
		}
		if _, _, err := s.UserByName(ctx, "nobody"); !errors.Is(err, cbdash.ErrNotFound) {
			t.Fatalf("UserByName(nobody): %v", err)
		}
		if _, err := s.CreateUser(ctx, "'; DROP TABLE users;--", cbdash.RoleViewer, []byte("x")); err != nil {
			t.Fatal(err)
		}
		all, err := s.Users(ctx)
		if err != nil || len(all) != 2 || all[0].Name != "'; DROP TABLE users;--" || all[1].Name != "alice" {
			t.Fatalf("Users = %+v, %v", all, err)
		}
	})

	t.Run("sessions expire and end on logout", func(t *testing.T) {
		u, _, _ := s.UserByName(ctx, "alice")
		tok, err := s.CreateSession(ctx, u.ID, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.SessionUser(ctx, tok, t0.Add(59*time.Minute)); err != nil || got.Name != "alice" {
			t.Fatalf("SessionUser = %+v, %v", got, err)
		}
		if _, err := s.SessionUser(ctx, tok, t0.Add(time.Hour)); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Fatalf("expired session: %v", err)
		}
		if _, err := s.SessionUser(ctx, tok+"x", t0); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Fatalf("unknown session: %v", err)
		}
		if err := s.DeleteSession(ctx, tok); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SessionUser(ctx, tok, t0); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Fatalf("deleted session: %v", err)
		}
		if _, err := s.CreateSession(ctx, 9999, t0.Add(time.Hour)); !errors.Is(err, cbdash.ErrNotFound) {
			t.Fatalf("session for unknown user: %v", err)
		}
	})

	t.Run("API tokens act as their user", func(t *testing.T) {
		u, _, _ := s.UserByName(ctx, "alice")
		tok, err := s.CreateUserToken(ctx, u.ID, "laptop")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.UserByToken(ctx, tok)
		if err != nil || got.ID != u.ID || got.Role != cbdash.RoleOperator {
			t.Fatalf("UserByToken = %+v, %v", got, err)
		}
		if _, err := s.UserByToken(ctx, "cbdash_ut_nope"); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Fatalf("unknown token: %v", err)
		}
		list, err := s.UserTokens(ctx, u.ID)
		if err != nil || len(list) != 1 || list[0].Name != "laptop" {
			t.Fatalf("UserTokens = %+v, %v", list, err)
		}
		if _, err := s.CreateUserToken(ctx, u.ID, ""); !errors.Is(err, cbdash.ErrInvalid) {
			t.Fatalf("empty token name: %v", err)
		}
	})
}

func TestSetPasswordReplacesTheHashAndEndsSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s, _ := openStore(t, store.Options{Clock: clockAt(now)})
	u, err := s.CreateUser(ctx, "admin", cbdash.RoleAdmin, []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, u.ID, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword(ctx, "admin", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, hash, err := s.UserByName(ctx, "admin"); err != nil || string(hash) != "new" {
		t.Fatalf("hash after SetPassword = %q, %v", hash, err)
	}
	if _, err := s.SessionUser(ctx, sess, now); !errors.Is(err, cbdash.ErrUnauthorized) {
		t.Fatalf("old session after SetPassword: %v, want ErrUnauthorized", err)
	}
	if err := s.SetPassword(ctx, "nobody", []byte("x")); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("SetPassword(nobody) = %v, want ErrNotFound", err)
	}
	if err := s.SetPassword(ctx, "admin", nil); !errors.Is(err, cbdash.ErrInvalid) {
		t.Fatalf("SetPassword with no hash = %v, want ErrInvalid", err)
	}
}
