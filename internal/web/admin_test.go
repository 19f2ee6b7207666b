package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash/internal/web"
)

func TestAdminManagesUsersAndTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	admin := h.login("ada")
	t.Run("operators cannot add users", func(t *testing.T) {
		res := h.login("otto").postForm("/admin/users", url.Values{"name": {"eve"}, "role": {"admin"}, "password": {"long-enough"}})
		if res.status != http.StatusForbidden {
			t.Fatalf("= %d, want 403", res.status)
		}
	})
	t.Run("admin adds a user who can log in", func(t *testing.T) {
		res := admin.postForm("/admin/users", url.Values{"name": {"<b>bob</b>"}, "role": {"operator"}, "password": {"bob-password"}})
		if res.status != http.StatusSeeOther {
			t.Fatalf("= %d %.300s", res.status, res.body)
		}
		if body := admin.get("/admin").body; !strings.Contains(body, "&lt;b&gt;bob&lt;/b&gt;") {
			t.Error("the new user is not listed as text")
		}
		h.users["<b>bob</b>"] = "bob-password"
		h.login("<b>bob</b>")
		if _, hash, err := h.st.UserByName(t.Context(), "<b>bob</b>"); err != nil {
			t.Fatal(err)
		} else if cost, _ := bcrypt.Cost(hash); cost != h.cfg.PasswordCost {
			t.Errorf("the new account's hash has bcrypt cost %d, want Config.PasswordCost %d", cost, h.cfg.PasswordCost)
		}
	})
	t.Run("bad input is refused", func(t *testing.T) {
		for _, f := range []url.Values{
			{"name": {"x"}, "role": {"root"}, "password": {"long-enough"}},
			{"name": {"x"}, "role": {"viewer"}, "password": {"short"}},
			{"name": {""}, "role": {"viewer"}, "password": {"long-enough"}},
		} {
			if res := admin.postForm("/admin/users", f); res.status != http.StatusBadRequest {
				t.Errorf("%v = %d, want 400", f, res.status)
			}
		}
		if res := admin.postForm("/admin/users", url.Values{"name": {"vera"}, "role": {"viewer"}, "password": {"long-enough"}}); res.status != http.StatusConflict {
			t.Errorf("duplicate = %d, want 409", res.status)
		}
	})
	t.Run("API and agent tokens are shown once and work", func(t *testing.T) {
		res := admin.postForm("/admin/tokens", url.Values{"user": {"vera"}, "name": {"laptop"}})
		i := strings.Index(res.body, "cbdash_ut_")
		if res.status != http.StatusOK || i < 0 {
			t.Fatalf("= %d, no token shown", res.status)
		}
		tok := res.body[i : i+strings.IndexByte(res.body[i:], '<')]
		req, _ := http.NewRequest(http.MethodGet, h.url+"/", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if r := h.client().do(req); r.status != http.StatusOK {
			t.Errorf("GET / with the new token = %d", r.status)
		}
		res = admin.postForm("/admin/agent-tokens", url.Values{"service": {"checkout"}})
		j := strings.Index(res.body, "cbdash_at_")
		if j < 0 {
			t.Fatal("no agent token shown")
		}
		atok := res.body[j : j+strings.IndexByte(res.body[j:], '<')]
		if svc, err := h.st.CheckAgentToken(t.Context(), atok); err != nil || svc != "checkout" {
			t.Errorf("agent token: %q %v", svc, err)
		}
	})
}
