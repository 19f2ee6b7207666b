package web_test

// The security regression suite (issue 13): each test replays a finding
// against a real server on loopback with a real store and asserts that
// it is refused, bounded or fixed.

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// secretIn returns the secret with prefix shown on a page, or "".
func secretIn(body, prefix string) string {
	i := strings.Index(body, prefix)
	if i < 0 {
		return ""
	}
	return body[i : i+strings.IndexByte(body[i:], '<')]
}

// bearerGet requests path as an API client with token.
func (h *harness) bearerGet(path, token string) response {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	return h.client().do(req)
}

// jsonGet requests path as the client, asking for JSON (401, not a
// redirect to the login page, when not logged in).
func (c *client) jsonGet(path string) response {
	req, _ := http.NewRequest(http.MethodGet, c.h.url+path, nil)
	req.Header.Set("Accept", "application/json")
	return c.do(req)
}

// refOf finds the reference of the token row on the admin page whose
// owner cell is owner.
func refOf(t *testing.T, h *harness, owner string) string {
	t.Helper()
	list, err := h.st.AllUserTokens(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list {
		if x.User == owner {
			return store.UserTokenRef(x.ID)
		}
	}
	t.Fatalf("no API token of %s", owner)
	return ""
}

func TestSecurityRevokedAccessEndsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	admin := h.login("ada")
	otto := h.login("otto")
	res := admin.postForm("/admin/tokens", url.Values{"user": {"otto"}, "name": {"cli"}})
	tok := secretIn(res.body, "cbdash_ut_")
	if tok == "" {
		t.Fatalf("no API token shown: %d", res.status)
	}
	if r := h.bearerGet("/", tok); r.status != http.StatusOK {
		t.Fatalf("a fresh API token = %d", r.status)
	}

	t.Run("a disabled user's sessions, API tokens and live sockets stop working at once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, _, err := otto.dial(ctx, "view=overview", "")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		if _, _, err := conn.Read(ctx); err != nil {
			t.Fatalf("first live message: %v", err)
		}
		if r := admin.postForm("/admin/users/disable", url.Values{"name": {"otto"}}); r.status != http.StatusSeeOther {
			t.Fatalf("disable = %d %.300s", r.status, r.body)
		}
		if r := otto.jsonGet("/"); r.status != http.StatusUnauthorized {
			t.Errorf("the disabled user's session = %d, want 401", r.status)
		}
		if r := h.bearerGet("/", tok); r.status != http.StatusUnauthorized {
			t.Errorf("the disabled user's API token = %d, want 401", r.status)
		}
		for {
			_, _, err := conn.Read(ctx)
			if err != nil {
				if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
					t.Errorf("the live socket ended with %v, want a policy-violation close", err)
				}
				break
			}
		}
		if r := h.client().postForm("/login", url.Values{"user": {"otto"}, "password": {h.users["otto"]}}); r.status != http.StatusForbidden ||
			!strings.Contains(r.body, "disabled") {
			t.Errorf("login of a disabled user = %d, want 403 saying disabled", r.status)
		}
		if r := admin.postForm("/admin/users/enable", url.Values{"name": {"otto"}}); r.status != http.StatusSeeOther {
			t.Fatalf("enable = %d", r.status)
		}
		if r := h.bearerGet("/", tok); r.status != http.StatusOK {
			t.Errorf("the API token after enabling = %d, want 200", r.status)
		}
	})

	t.Run("a revoked API token gets 401 at once", func(t *testing.T) {
		ref := refOf(t, h, "otto")
		if body := admin.get("/admin").body; !strings.Contains(body, ref) {
			t.Fatalf("the admin page does not list %s", ref)
		}
		if r := admin.postForm("/admin/tokens/revoke", url.Values{"ref": {ref}}); r.status != http.StatusSeeOther {
			t.Fatalf("revoke = %d %.300s", r.status, r.body)
		}
		if r := h.bearerGet("/", tok); r.status != http.StatusUnauthorized {
			t.Errorf("a revoked API token = %d, want 401", r.status)
		}
	})

	t.Run("a role change takes effect on the next request", func(t *testing.T) {
		vera := h.login("vera")
		if r := vera.get("/admin"); r.status != http.StatusForbidden {
			t.Fatalf("viewer on /admin = %d, want 403", r.status)
		}
		if r := admin.postForm("/admin/users/role", url.Values{"name": {"vera"}, "role": {cbdash.RoleAdmin}}); r.status != http.StatusSeeOther {
			t.Fatalf("role = %d %.300s", r.status, r.body)
		}
		if r := vera.get("/admin"); r.status != http.StatusOK {
			t.Errorf("promoted to admin, /admin = %d", r.status)
		}
		admin.postForm("/admin/users/role", url.Values{"name": {"vera"}, "role": {cbdash.RoleViewer}})
		if r := vera.get("/admin"); r.status != http.StatusForbidden {
			t.Errorf("demoted again, /admin = %d, want 403", r.status)
		}
		if r := admin.postForm("/admin/users/role", url.Values{"name": {"vera"}, "role": {"root"}}); r.status != http.StatusBadRequest {
			t.Errorf("unknown role = %d, want 400", r.status)
		}
	})

	t.Run("the last admin cannot lock everyone out", func(t *testing.T) {
		for _, path := range []string{"/admin/users/disable", "/admin/users/delete"} {
			if r := admin.postForm(path, url.Values{"name": {"ada"}}); r.status != http.StatusConflict {
				t.Errorf("%s of the only admin = %d, want 409", path, r.status)
			}
		}
		if r := admin.postForm("/admin/users/role", url.Values{"name": {"ada"}, "role": {cbdash.RoleViewer}}); r.status != http.StatusConflict {
			t.Errorf("demoting the only admin = %d, want 409", r.status)
		}
	})

	t.Run("a deleted user is gone with its sessions", func(t *testing.T) {
		vera := h.login("vera")
		if r := admin.postForm("/admin/users/delete", url.Values{"name": {"vera"}}); r.status != http.StatusSeeOther {
			t.Fatalf("delete = %d", r.status)
		}
		if r := vera.jsonGet("/"); r.status != http.StatusUnauthorized {
			t.Errorf("the deleted user's session = %d, want 401", r.status)
		}
	})

	t.Run("only admins may change accounts", func(t *testing.T) {
		otto := h.login("otto")
		for path, form := range map[string]url.Values{
			"/admin/users/disable": {"name": {"ada"}}, "/admin/users/delete": {"name": {"ada"}},
			"/admin/users/role": {"name": {"otto"}, "role": {"admin"}}, "/admin/tokens/revoke": {"ref": {"ut-1"}},
			"/admin/tokens/expire": {"ref": {"ut-1"}, "days": {"1"}},
		} {
			if r := otto.postForm(path, form); r.status != http.StatusForbidden {
				t.Errorf("operator %s = %d, want 403", path, r.status)
			}
		}
	})

	t.Run("every action is in the account log", func(t *testing.T) {
		evs, err := h.st.AccountEvents(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Actor+": "+e.Action+" "+e.Subject)
		}
		log := strings.Join(got, "\n")
		for _, want := range []string{"ada: token create ut-", "ada: user disable otto", "ada: user enable otto", "ada: token revoke ut-",
			"ada: user role vera", "ada: user delete vera"} {
			if !strings.Contains(log, want) {
				t.Errorf("account log lacks %q:\n%s", want, log)
			}
		}
		if body := admin.get("/admin").body; !strings.Contains(body, "user delete") {
			t.Error("the admin page does not show the account log")
		}
	})
}

func TestSecurityRevokedAgentTokenClosesItsConnection(t *testing.T) {
	s := startStack(t, 0)
	ctx := t.Context()
	hash, _ := web.HashPassword("admin-password")
	if _, err := s.st.CreateUser(ctx, "ada", cbdash.RoleAdmin, hash); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: s.st, url: s.url, users: map[string]string{"ada": "admin-password"}}
	admin := h.login("ada")
	tok := secretIn(admin.postForm("/admin/agent-tokens", url.Values{"service": {"checkout"}, "days": {"30"}}).body, "cbdash_at_")
	if tok == "" {
		t.Fatal("no agent token shown")
	}
	agentURL := "ws" + strings.TrimPrefix(s.url, "http") + "/api/v1/agent"
	connect := func() *websocket.Conn {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(dctx, agentURL, &websocket.DialOptions{
			Subprotocols: []string{protocol.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.CloseNow() })
		hello := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: "checkout-9",
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 10,
				FailureRateThreshold: 50, MinimumCalls: 5, OpenDurationMillis: 1000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}}
		if err := wsjson.Write(dctx, conn, hello); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	conn := connect()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, msg, err := conn.Read(rctx); err != nil || !strings.Contains(string(msg), `"welcome"`) {
		t.Fatalf("welcome: %s %v", msg, err)
	}
	body := admin.get("/admin").body
	ref := store.AgentTokenRef(store.AgentTokenID(tok))
	if !strings.Contains(body, ref) {
		t.Fatalf("the admin page does not list %s", ref)
	}
	res := admin.postForm("/admin/tokens/revoke", url.Values{"ref": {ref}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.header.Get("Location"), "1+open+connections+closed") {
		t.Fatalf("revoke = %d, Location %q", res.status, res.header.Get("Location"))
	}
	revoked := time.Now()
	for {
		if _, _, err := conn.Read(rctx); err != nil {
			break
		}
	}
	if d := time.Since(revoked); d > time.Second {
		t.Errorf("the connection closed %v after the revocation, want at once", d)
	}
	again := connect()
	_, msg, err := again.Read(rctx)
	if err != nil || !strings.Contains(string(msg), "agent token") || !strings.Contains(string(msg), `"fatal":true`) {
		t.Errorf("reconnect with the revoked token: %s %v, want a fatal token error", msg, err)
	}
}

func TestAdminSetsATokensExpiryAfterItsCreation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	clk := h.virtual()
	admin := h.login("ada")
	tok := secretIn(admin.postForm("/admin/tokens", url.Values{"user": {"otto"}, "name": {"cli"}}).body, "cbdash_ut_")
	ref := refOf(t, h, "otto")
	if r := admin.postForm("/admin/tokens/expire", url.Values{"ref": {ref}, "days": {"0"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, "days") {
		t.Errorf("0 days = %d, want 400 naming days", r.status)
	}
	if r := admin.postForm("/admin/tokens/expire", url.Values{"ref": {ref}, "days": {"1"}}); r.status != http.StatusSeeOther {
		t.Fatalf("expire in 1 day = %d %.300s", r.status, r.body)
	}
	if r := h.bearerGet("/", tok); r.status != http.StatusOK {
		t.Fatalf("the token before its expiry = %d", r.status)
	}
	if !strings.Contains(admin.get("/admin").body, clk.Now().Add(24*time.Hour).UTC().Format(time.DateOnly)) {
		t.Error("the admin page does not show the new expiry")
	}
	clk.Advance(25 * time.Hour)
	if r := h.bearerGet("/", tok); r.status != http.StatusUnauthorized {
		t.Errorf("the token after its expiry = %d, want 401", r.status)
	}
	admin = h.login("ada") // her session of 12 h ended too
	if r := admin.postForm("/admin/tokens/expire", url.Values{"ref": {ref}}); r.status != http.StatusSeeOther {
		t.Fatalf("expire never = %d %.300s", r.status, r.body)
	}
	if r := h.bearerGet("/", tok); r.status != http.StatusOK {
		t.Errorf("the token set to never expire = %d, want 200", r.status)
	}
	evs, err := h.st.AccountEvents(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if strings.Contains(e.Action, "expire") && e.Actor == "ada" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d expiry changes by ada in the account log, want 2: %+v", n, evs)
	}
}
