package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
)

func TestAccountLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.Virtual()
	s, _ := openStore(t, store.Options{Clock: clk})
	mk := func(name, role string) cbdash.User {
		t.Helper()
		u, err := s.CreateUser(ctx, name, role, []byte("hash-"+name))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ada, otto := mk("ada", cbdash.RoleAdmin), mk("otto", cbdash.RoleOperator)

	t.Run("disabling ends sessions and API tokens at once, enabling brings back tokens only", func(t *testing.T) {
		sess, err := s.CreateSession(ctx, otto.ID, clk.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.CreateUserToken(ctx, otto.ID, "cli")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetUserDisabled(ctx, "ada", "otto", true); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SessionUser(ctx, sess, clk.Now()); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("session of a disabled user: %v, want ErrUnauthorized", err)
		}
		if _, err := s.UserByToken(ctx, tok); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("API token of a disabled user: %v, want ErrUnauthorized", err)
		}
		if _, err := s.CreateSession(ctx, otto.ID, clk.Now().Add(time.Hour)); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("new session of a disabled user: %v, want ErrNotFound", err)
		}
		if u, _, _ := s.UserByName(ctx, "otto"); !u.Disabled {
			t.Error("UserByName does not say otto is disabled")
		}
		if err := s.SetUserDisabled(ctx, "ada", "otto", false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UserByToken(ctx, tok); err != nil {
			t.Errorf("API token after enabling: %v", err)
		}
		if _, err := s.SessionUser(ctx, sess, clk.Now()); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("a session ended by disabling came back: %v", err)
		}
	})

	t.Run("the last enabled admin cannot be disabled, demoted or deleted", func(t *testing.T) {
		for what, err := range map[string]error{
			"disable": s.SetUserDisabled(ctx, "otto", "ada", true),
			"demote":  s.SetUserRole(ctx, "otto", "ada", cbdash.RoleViewer),
			"delete":  s.DeleteUser(ctx, "otto", "ada"),
		} {
			if !errors.Is(err, cbdash.ErrConflict) {
				t.Errorf("%s the last admin: %v, want ErrConflict", what, err)
			}
		}
		if err := s.SetUserRole(ctx, "ada", "otto", cbdash.RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUserRole(ctx, "otto", "ada", cbdash.RoleViewer); err != nil {
			t.Errorf("demoting one of two admins: %v", err)
		}
		if err := s.SetUserRole(ctx, "otto", "ada", "root"); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("unknown role: %v, want ErrInvalid", err)
		}
		if err := s.SetUserRole(ctx, "otto", "nobody", cbdash.RoleViewer); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("unknown user: %v, want ErrNotFound", err)
		}
	})

	t.Run("API tokens are listed with last use, expire and are revoked", func(t *testing.T) {
		tok, err := s.CreateUserToken(ctx, ada.ID, "laptop")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.UserByToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
		var mine cbdash.APIToken
		eventually.True(t, "last use recorded", func() bool {
			list, err := s.AllUserTokens(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range list {
				if x.User == "ada" && x.Name == "laptop" {
					mine = x
				}
			}
			return mine.LastUsed.Equal(clk.Now())
		})
		if err := s.ExpireUserToken(ctx, "otto", mine.ID, clk.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UserByToken(ctx, tok); err != nil {
			t.Errorf("before its expiry: %v", err)
		}
		clk.Advance(time.Minute)
		if _, err := s.UserByToken(ctx, tok); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("after its expiry: %v, want ErrUnauthorized", err)
		}
		if err := s.RevokeUserToken(ctx, "otto", mine.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeUserToken(ctx, "otto", mine.ID); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("second revoke: %v, want ErrNotFound", err)
		}
		for range 2 {
			if _, err := s.CreateUserToken(ctx, otto.ID, "ci"); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.RevokeUserTokens(ctx, "ada", "otto"); err != nil || n != 3 {
			t.Errorf("RevokeUserTokens = %d, %v; want otto's 3", n, err)
		}
	})

	t.Run("agent tokens expire, are revoked, and LiveAgentTokens says which still hold", func(t *testing.T) {
		a, _ := s.CreateAgentToken(ctx, "checkout")
		b, _ := s.CreateAgentToken(ctx, "")
		ia, ib := store.AgentTokenID(a), store.AgentTokenID(b)
		if err := s.ExpireAgentToken(ctx, "ada", ia, clk.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CheckAgentToken(ctx, a); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("expired agent token: %v, want ErrUnauthorized", err)
		}
		live, err := s.LiveAgentTokens(ctx, []string{ia, ib, "0000000000000000"}, clk.Now())
		if err != nil || live[ia] || !live[ib] || len(live) != 1 {
			t.Errorf("LiveAgentTokens = %v, %v; want only %s", live, err, ib)
		}
		list, _ := s.AgentTokens(ctx)
		var found bool
		for _, x := range list {
			found = found || (x.ID == ia && x.ExpiresAt.Equal(clk.Now()))
		}
		if !found {
			t.Errorf("AgentTokens does not show %s expiring: %+v", ia, list)
		}
		if err := s.RevokeAgentToken(ctx, "ada", ib); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CheckAgentToken(ctx, b); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("revoked agent token: %v", err)
		}
	})

	t.Run("deleting a user takes its tokens", func(t *testing.T) {
		tok, _ := s.CreateUserToken(ctx, otto.ID, "x")
		if err := s.SetUserRole(ctx, "otto", "ada", cbdash.RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteUser(ctx, "ada", "otto"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UserByToken(ctx, tok); !errors.Is(err, cbdash.ErrUnauthorized) {
			t.Errorf("token of a deleted user: %v", err)
		}
		if _, _, err := s.UserByName(ctx, "otto"); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("deleted user: %v", err)
		}
	})

	t.Run("every change is in the append-only account log", func(t *testing.T) {
		evs, err := s.AccountEvents(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Actor+" "+e.Action+" "+e.Subject)
		}
		want := []string{"ada user delete otto", "otto user role ada", "ada agent token revoke at-", "ada agent token expire at-",
			"ada user tokens revoke otto", "otto token revoke ut-", "otto token expire ut-", "otto user role ada",
			"ada user role otto", "ada user enable otto", "ada user disable otto"}
		if len(got) != len(want) {
			t.Fatalf("account log:\n%q\nwant %d entries like\n%q", got, len(want), want)
		}
		for i := range want {
			if len(got[i]) < len(want[i]) || got[i][:len(want[i])] != want[i] {
				t.Errorf("entry %d = %q, want %q...", i, got[i], want[i])
			}
		}
		if err := s.RecordAccountEvent(ctx, cbdash.AccountEvent{Actor: "", Action: cbdash.AccountUserAdd}); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("event without actor: %v, want ErrInvalid", err)
		}
	})
}
