package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
)

// TestMain runs the tests, stops the browser they share (see browser),
// then fails the run if a goroutine was left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	stopChromium()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestLogin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{LoginBurst: 3}, dep("checkout", "payments", 1, 0))
	t.Run("wrong password is refused", func(t *testing.T) {
		res := h.client().postForm("/login", url.Values{"user": {"vera"}, "password": {"nope-nope"}})
		if res.status != http.StatusUnauthorized || !strings.Contains(res.body, "Wrong user name or password") {
			t.Fatalf("= %d", res.status)
		}
	})
	t.Run("session cookie is HttpOnly and SameSite=Lax; next stays local", func(t *testing.T) {
		c := h.client()
		res := c.postForm("/login", url.Values{"user": {"vera"}, "password": {h.users["vera"]}, "next": {"//evil.example/"}})
		if res.status != http.StatusSeeOther || res.header.Get("Location") != "/" {
			t.Fatalf("= %d to %q", res.status, res.header.Get("Location"))
		}
		var ck string
		for _, v := range res.header.Values("Set-Cookie") {
			if strings.HasPrefix(v, "cbdash_session=") {
				ck = v
			}
		}
		if !strings.Contains(ck, "cbdash_session=") || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Lax") || strings.Contains(ck, "Secure") {
			t.Errorf("cookie %q", ck)
		}
		if res := c.postForm("/logout", url.Values{}); res.status != http.StatusSeeOther {
			t.Fatalf("logout = %d", res.status)
		}
		if res := c.get("/"); res.status != http.StatusSeeOther {
			t.Errorf("after logout GET / = %d, want a redirect to the login", res.status)
		}
	})
	t.Run("failed attempts per IP and user are rate limited", func(t *testing.T) {
		c := h.client()
		for i := range 3 {
			if res := c.postForm("/login", url.Values{"user": {"otto"}, "password": {"guess"}}); res.status != http.StatusUnauthorized {
				t.Fatalf("attempt %d = %d", i, res.status)
			}
		}
		res := c.postForm("/login", url.Values{"user": {"otto"}, "password": {h.users["otto"]}})
		if res.status != http.StatusTooManyRequests {
			t.Fatalf("after 3 failures, the right password = %d, want 429", res.status)
		}
		if res := c.postForm("/login", url.Values{"user": {"ada"}, "password": {h.users["ada"]}}); res.status != http.StatusSeeOther {
			t.Fatalf("another user from the same IP = %d, want 303", res.status)
		}
	})
}

func TestSecureCookies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{Secure: true})
	res := h.client().postForm("/login", url.Values{"user": {"vera"}, "password": {h.users["vera"]}})
	for _, ck := range res.header.Values("Set-Cookie") {
		if !strings.Contains(ck, "Secure") {
			t.Errorf("cookie %q is not Secure", ck)
		}
	}
	if hsts := res.header.Get("Strict-Transport-Security"); hsts == "" {
		t.Error("no HSTS behind TLS")
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	for _, p := range []string{"/login", "/static/app.css", "/nope"} {
		res := h.client().get(p)
		csp := res.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin"} {
			if res.header.Get(k) != v {
				t.Errorf("%s: %s = %q", p, k, res.header.Get(k))
			}
		}
	}
	if res := h.client().get("/login"); strings.Contains(res.body, "<script>") || strings.Contains(res.body, "style=") {
		t.Error("a page has inline script or style")
	}
	if res := h.client().get("/static/vendor/htmx/htmx.min.js"); res.status != http.StatusOK || !strings.Contains(res.body, "htmx") {
		t.Errorf("vendored htmx = %d", res.status)
	}
}

func TestAnonymousViewing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{Anonymous: true}, dep("checkout", "payments", 2, 0))
	c := h.client()
	if res := c.get("/"); res.status != http.StatusOK || !strings.Contains(res.body, "read-only view") {
		t.Fatalf("anonymous GET / = %d", res.status)
	}
	res := c.postForm("/dependency/command", url.Values{"service": {"checkout"}, "breaker": {"payments"}, "action": {"reset"}, "reason": {"x"}})
	if res.status != http.StatusUnauthorized {
		t.Errorf("anonymous command = %d, want 401", res.status)
	}
	if res := c.get("/admin"); res.status != http.StatusSeeOther {
		t.Errorf("anonymous admin = %d, want a redirect to the login", res.status)
	}
}

func TestEnsureAdmin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	// The harness already has users: nothing is created.
	if created, pw, err := web.EnsureAdmin(context.Background(), h.st, ""); err != nil || created || pw != "" {
		t.Fatalf("with users: %v %q %v", created, pw, err)
	}
	h2 := newHarnessEmpty(t)
	created, pw, err := web.EnsureAdmin(context.Background(), h2.st, "")
	if err != nil || !created || len(pw) < 16 {
		t.Fatalf("first start: %v %q %v", created, pw, err)
	}
	h2.users["admin"] = pw
	if res := h2.login("admin").get("/admin"); res.status != http.StatusOK {
		t.Fatalf("admin with the one-time password: %d", res.status)
	}
}

func TestHTTPErrorHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("breaker x: %w", cbdash.ErrNotFound), 404, "breaker x not found"},
		{fmt.Errorf("store: incident 99999: %w", cbdash.ErrNotFound), 404, "incident 99999 not found"},
		{fmt.Errorf("%w: incident %s", cbdash.ErrNotFound, "abc"), 404, "incident abc not found"},
		{fmt.Errorf("%w: reason is required", cbdash.ErrInvalid), 400, "invalid input: reason is required"},
		{cbdash.ErrUnauthorized, 401, "unauthorized"},
		{cbdash.ErrForbidden, 403, "forbidden"},
		{cbdash.ErrConflict, 409, "conflict"},
		{fmt.Errorf("collector is not ready: %w", cbdash.ErrUnavailable), 503, "collector is not ready"},
		{echo.NewHTTPError(http.StatusTeapot, "short and stout"), 418, "short and stout"},
		{errors.New("disk on fire"), 500, "internal error"},
	} {
		for _, path := range []string{"/api/v1/x", "/page"} {
			t.Run(fmt.Sprint(tc.status, path), func(t *testing.T) {
				e := echo.New()
				req := httptest.NewRequest(http.MethodGet, path, nil)
				rec := httptest.NewRecorder()
				web.HTTPErrorHandler(tc.err, e.NewContext(req, rec))
				if rec.Code != tc.status {
					t.Fatalf("status %d, want %d", rec.Code, tc.status)
				}
				if path == "/page" {
					if !strings.Contains(rec.Body.String(), "<html") || !strings.Contains(rec.Body.String(), tc.msg) {
						t.Errorf("HTML page lacks %q: %s", tc.msg, rec.Body)
					}
					return
				}
				var body map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error"] != tc.msg {
					t.Errorf("JSON %s, want error %q", rec.Body, tc.msg)
				}
			})
		}
	}
	t.Run("Accept: application/json gets JSON", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "/dependency", nil)
		req.Header.Set("Accept", "application/json")
		rec := httptest.NewRecorder()
		web.HTTPErrorHandler(cbdash.ErrNotFound, echo.New().NewContext(req, rec))
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("content type %q", rec.Header().Get("Content-Type"))
		}
	})
}
