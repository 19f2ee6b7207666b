package web_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
)

func TestJSONAPIAuth(t *testing.T) {
	t.Parallel()
	s := startStack(t, 2)
	ctx := context.Background()
	waitDependency(t, s)
	hash, _ := web.HashPassword("viewer-password")
	vera, err := s.st.CreateUser(ctx, "vera", cbdash.RoleViewer, hash)
	if err != nil {
		t.Fatal(err)
	}
	otto, _, _ := s.st.UserByName(ctx, "otto")
	veraTok, _ := s.st.CreateUserToken(ctx, vera.ID, "cli")
	ottoTok, _ := s.st.CreateUserToken(ctx, otto.ID, "cli")
	cmd := `{"service":"checkout","breaker":"payments","action":"reset","reason":"api test","actor":"mallory"}`

	call := func(c *http.Client, method, path, token, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	hc := http.DefaultClient
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"no credentials", "GET", "/api/v1/breakers", "", "", 401},
		{"unknown token", "GET", "/api/v1/breakers", "cbdash_ut_nope", "", 401},
		{"viewer reads", "GET", "/api/v1/breakers", veraTok, "", 200},
		{"viewer cannot command", "POST", "/api/v1/commands", veraTok, cmd, 403},
		{"unknown route, no credentials", "GET", "/api/v1/breakers/checkout", "", "", 404},
		{"unknown route, operator", "GET", "/api/v1/breakers/checkout", ottoTok, "", 404},
		{"unknown api, no credentials", "GET", "/api/v1/nosuch", "", "", 404},
		{"unknown api, operator", "POST", "/api/v1/nosuch", ottoTok, "{}", 404},
		{"unknown page, operator token", "GET", "/nosuchpage", ottoTok, "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, body := call(hc, tc.method, tc.path, tc.token, tc.body, nil); st != tc.status {
				t.Fatalf("%s %s = %d %v, want %d", tc.method, tc.path, st, body, tc.status)
			}
		})
	}
	t.Run("operator token commands as its user", func(t *testing.T) {
		st, body := call(hc, "POST", "/api/v1/commands", ottoTok, cmd, nil)
		if st != http.StatusCreated || body["actor"] != "otto" {
			t.Fatalf("= %d %v, want 201 with actor otto", st, body)
		}
	})
	t.Run("a session needs the CSRF header", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := c.Get(s.url + "/login")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		u, _ := url.Parse(s.url)
		var csrf string
		for _, ck := range jar.Cookies(u) {
			if ck.Name == "cbdash_csrf" {
				csrf = ck.Value
			}
		}
		res, err = c.PostForm(s.url+"/login", url.Values{"user": {"otto"}, "password": {s.password}, "_csrf": {csrf}})
		if err != nil || res.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %v %v", err, res)
		}
		res.Body.Close()
		if st, body := call(c, "POST", "/api/v1/commands", "", cmd, nil); st != http.StatusForbidden {
			t.Fatalf("without CSRF header = %d %v, want 403", st, body)
		}
		// The login form's token was the cookie's; a session's is bound to
		// the session and read from its pages.
		if st, body := call(c, "POST", "/api/v1/commands", "", cmd, map[string]string{"X-CSRF-Token": csrf}); st != http.StatusForbidden {
			t.Fatalf("with the pre-login cookie's token = %d %v, want 403 (the token is bound to the session)", st, body)
		}
		page, err := c.Get(s.url + "/")
		if err != nil {
			t.Fatal(err)
		}
		pageBody, _ := io.ReadAll(page.Body)
		page.Body.Close()
		m := csrfInput.FindStringSubmatch(string(pageBody))
		if m == nil {
			t.Fatal("the overview carries no CSRF token")
		}
		csrf = html.UnescapeString(m[1])
		if st, body := call(c, "POST", "/api/v1/commands", "", cmd, map[string]string{"X-CSRF-Token": csrf}); st != http.StatusCreated || body["actor"] != "otto" {
			t.Fatalf("with CSRF header = %d %v, want 201 by otto", st, body)
		}
	})
}

// waitDependency waits until the collector knows checkout/payments.
func waitDependency(t *testing.T, s *stack) {
	t.Helper()
	eventually.True(t, "the agents to register checkout/payments", func() bool {
		_, err := s.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil
	})
}
