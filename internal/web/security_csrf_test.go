package web_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/cbdash/cbdash/internal/web"
)

// Finding 10: the CSRF token was a double-submit cookie, so a cookie
// planted by a sibling subdomain (with the same value in the forged form)
// was accepted. A session's token is now bound to the session.
func TestSecurityCSRFTokenIsBoundToTheSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	otto := h.login("otto")
	u, _ := url.Parse(h.url)
	// What a sibling subdomain can do: set cbdash_csrf for the parent domain.
	otto.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "cbdash_csrf", Value: "planted-by-a-sibling", Path: "/"}})
	form := url.Values{"service": {"checkout"}, "breaker": {"payments"}, "action": {"force_open"},
		"scope": {"all"}, "ttl": {"15"}, "reason": {"forged"}, "_csrf": {"planted-by-a-sibling"}}
	if res := otto.rawPost("/dependency/command", form); res.status != http.StatusForbidden {
		t.Errorf("a forged form with a planted CSRF cookie = %d, want 403", res.status)
	}
	// The session's own token (from its pages) works, and is not the cookie's.
	tok := otto.csrf()
	if tok == "planted-by-a-sibling" || tok == "" {
		t.Fatalf("the page's token is %q", tok)
	}
	form.Set("_csrf", tok)
	form.Set("reason", "drill the fallback")
	if res := otto.rawPost("/dependency/command", form); res.status != http.StatusSeeOther {
		t.Errorf("with the session's token = %d %.200s, want 303", res.status, res.body)
	}
	// Another session's token does not work for this one.
	if other := h.login("ada").csrf(); other == tok {
		t.Error("two sessions share a CSRF token")
	}
}
