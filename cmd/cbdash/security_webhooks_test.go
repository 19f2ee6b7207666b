package main

// The security regression suite, webhooks (issue 13, items 6 and 9),
// against the server as serve wires it, on loopback, its log captured.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// liveServer is openServer + run on a virtual clock, with a viewer, an
// operator and an admin, each with an API token.
type liveServer struct {
	t      *testing.T
	srv    *server
	clk    *breakertest.Clock
	logs   *logBuffer
	tokens map[string]string // user -> API token
	agent  string            // an agent token for any service
}

// startServer opens a server with o adjusted by mod, lets before act on
// it (its store) before it runs, and runs it until the test ends.
func startServer(t *testing.T, mod func(*serveOptions), before func(*server)) *liveServer {
	t.Helper()
	var o serveOptions
	o.Addr, o.DB = "127.0.0.1:0", filepath.Join(t.TempDir(), "cbdash.db")
	o.LogLevel, o.LogFormat, o.AdminPassword = "debug", "text", "admin-password"
	if mod != nil {
		mod(&o)
	}
	ls := &liveServer{t: t, clk: clocktest.Virtual(), logs: &logBuffer{}, tokens: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, o, slog.New(slog.NewTextHandler(ls.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), ls.clk)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ls.srv = srv
	for name, role := range map[string]string{"vera": cbdash.RoleViewer, "otto": cbdash.RoleOperator, "ada": cbdash.RoleAdmin} {
		hash, _ := web.HashPassword("password-" + name)
		u, err := srv.store.CreateUser(ctx, name, role, hash)
		if err != nil {
			t.Fatal(err)
		}
		if ls.tokens[name], err = srv.store.CreateUserToken(ctx, u.ID, "cli"); err != nil {
			t.Fatal(err)
		}
	}
	if ls.agent, err = srv.store.CreateAgentToken(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	eventually.True(t, "GET /readyz 200", func() bool { return ls.call(http.MethodGet, "/readyz", "", nil).status == http.StatusOK })
	return ls
}

type answer struct {
	status int
	body   string
}

// call requests path as user ("" = no credentials, an agent token when
// user is "agent"), with body as JSON when not nil.
func (ls *liveServer) call(method, path, user string, body any) answer {
	ls.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, ls.srv.URL()+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	switch {
	case user == "agent":
		req.Header.Set("Authorization", "Bearer "+ls.agent)
	case user != "":
		req.Header.Set("Authorization", "Bearer "+ls.tokens[user])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ls.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, string(b)}
}

// trip reports, through the ingest API, that checkout/payments opened on
// checkout-1 half a second ago.
func (ls *liveServer) trip() {
	ls.t.Helper()
	now := ls.clk.Now()
	cfg := protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50,
		MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1}
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: "checkout-1",
			SDKVersion: "test", StartedAt: now.Add(-time.Hour).UnixMilli(), Breakers: []protocol.BreakerConfig{cfg}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(),
			Transitions: []protocol.Transition{{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen,
				At: now.Add(-500 * time.Millisecond).UnixMilli(), OpenMillis: 5000,
				Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50, WindowCalls: 20, WindowFailed: 11}}}},
	}
	if a := ls.call(http.MethodPost, "/api/v1/ingest", "agent", req); a.status != http.StatusOK {
		ls.t.Fatalf("ingest = %d %s", a.status, a.body)
	}
}

// hook is a webhook receiver on loopback: healthy (records what it
// gets), dead (accepts and never answers, until the test ends) or a
// redirect to another.
type hook struct {
	*httptest.Server
	mu       sync.Mutex
	paths    []string
	inFlight atomic.Int64
	gaveUp   atomic.Int64 // dead: calls the sender gave up (timed out) before the test ended
}

func newHook(t *testing.T, dead bool, redirectTo string) *hook {
	t.Helper()
	h := &hook{}
	release := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case dead:
			h.inFlight.Add(1)
			defer h.inFlight.Add(-1)
			select {
			case <-release:
			case <-r.Context().Done():
				h.gaveUp.Add(1)
			}
			return
		case redirectTo != "":
			http.Redirect(w, r, redirectTo, http.StatusFound)
			return
		}
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
	}))
	t.Cleanup(func() { close(release); h.Close() })
	return h
}

func (h *hook) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.paths...)
}

type ruleIn struct {
	Name       string `json:"name"`
	Service    string `json:"service"`
	Breaker    string `json:"breaker,omitempty"`
	Kind       string `json:"kind"`
	WebhookURL string `json:"webhook_url"`
}

const slackURL = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"

func TestSecurityWebhooks(t *testing.T) {
	t.Parallel()
	healthy := newHook(t, false, "")
	dead := newHook(t, true, "")
	redirect := newHook(t, false, healthy.URL+"/redirected")
	// The receivers are on loopback: this server allows it explicitly.
	ls := startServer(t, func(o *serveOptions) { o.AllowPrivateWebhooks = true }, nil)
	for _, r := range []ruleIn{
		{"dead receiver", "checkout", "payments", cbdash.AlertOpen, dead.URL + "/hook/SECRET-DEAD"},
		{"healthy receiver", "checkout", "payments", cbdash.AlertOpen, healthy.URL + "/hook/SECRET-OK"},
		{"redirecting receiver", "checkout", "payments", cbdash.AlertOpen, redirect.URL + "/hook/SECRET-REDIRECT"},
		{"slack", "billing", "", cbdash.AlertOpen, slackURL},
	} {
		if a := ls.call(http.MethodPost, "/api/v1/alerts/rules", "otto", r); a.status != http.StatusCreated {
			t.Fatalf("create rule %s = %d %s", r.Name, a.status, a.body)
		} else if strings.Contains(a.body, "SECRET") {
			t.Errorf("the operator's create answer shows the webhook URL: %s", a.body)
		}
	}

	t.Run("one dead receiver does not delay another rule's alert", func(t *testing.T) {
		ls.trip()
		eventually.True(t, "the healthy receiver has its alert", func() bool { return len(healthy.got()) > 0 })
		// The dead receiver's call was neither answered nor given up
		// when the other alert arrived: the healthy one did not wait
		// for it. (On a busy machine the dead call may reach its
		// handler after the healthy one: it is then still coming.)
		if n := dead.gaveUp.Load(); n != 0 {
			t.Errorf("the dead receiver's call was given up %d times before the healthy receiver got its alert", n)
		}
		eventually.True(t, "the dead receiver has its call in flight", func() bool { return dead.inFlight.Load() == 1 })
		if got := healthy.got(); got[0] != "/hook/SECRET-OK" {
			t.Errorf("the healthy receiver got %v", got)
		}
	})
	t.Run("redirects are not followed", func(t *testing.T) {
		eventually.True(t, "the redirect's delivery logged", func() bool {
			return strings.Contains(ls.call(http.MethodGet, "/api/v1/alerts/deliveries?rule=3", "ada", nil).body, "redirects are not followed")
		})
		for _, p := range healthy.got() {
			if p == "/redirected" {
				t.Error("the redirect was followed")
			}
		}
	})
	t.Run("webhook URLs are masked to everyone but admins", func(t *testing.T) {
		for _, user := range []string{"vera", "otto"} {
			rules := ls.call(http.MethodGet, "/api/v1/alerts/rules", user, nil)
			if rules.status != http.StatusOK || strings.Contains(rules.body, "SECRET") || strings.Contains(rules.body, "B000") {
				t.Errorf("%s's rule list shows a webhook URL: %d %s", user, rules.status, rules.body)
			}
			if !strings.Contains(rules.body, `"https://hooks.slack.com/…"`) {
				t.Errorf("%s's rule list lacks the masked Slack URL: %s", user, rules.body)
			}
			if one := ls.call(http.MethodGet, "/api/v1/alerts/rules/4", user, nil); strings.Contains(one.body, "SECRET") {
				t.Errorf("%s's GET of a rule shows its webhook URL: %s", user, one.body)
			}
			if ds := ls.call(http.MethodGet, "/api/v1/alerts/deliveries", user, nil); ds.status != http.StatusOK || strings.Contains(ds.body, "SECRET") {
				t.Errorf("%s's delivery log shows a webhook URL: %d %s", user, ds.status, ds.body)
			}
		}
		if rules := ls.call(http.MethodGet, "/api/v1/alerts/rules", "ada", nil); !strings.Contains(rules.body, slackURL) {
			t.Errorf("the admin does not see the webhook URL: %s", rules.body)
		}
		if ds := ls.call(http.MethodGet, "/api/v1/alerts/deliveries", "ada", nil); !strings.Contains(ds.body, "SECRET-OK") {
			t.Errorf("the admin's delivery log lacks the webhook URL: %s", ds.body)
		}
	})
	t.Run("an operator editing a rule with its masked URL keeps the secret", func(t *testing.T) {
		// As it is shown now, and as it was shown before issue 27 (a
		// client may have kept that).
		for i, shown := range []string{"https://hooks.slack.com/…", "https://hooks.slack.com/services/T…/…"} {
			masked := ruleIn{fmt.Sprintf("slack, renamed %d", i), "billing", "", cbdash.AlertOpen, shown}
			if a := ls.call(http.MethodPut, "/api/v1/alerts/rules/4", "otto", masked); a.status != http.StatusOK {
				t.Fatalf("PUT with %q = %d %s", shown, a.status, a.body)
			}
			r, err := ls.srv.store.AlertRule(t.Context(), 4)
			if err != nil || r.WebhookURL != slackURL || r.Name != masked.Name {
				t.Errorf("after the PUT with %q the rule is %+v, %v", shown, r, err)
			}
		}
		// Another rule's masked URL is refused, not saved as the webhook.
		other := ruleIn{"slack", "billing", "", cbdash.AlertOpen, "https://hooks.example/…"}
		if a := ls.call(http.MethodPut, "/api/v1/alerts/rules/4", "otto", other); a.status != http.StatusBadRequest || !strings.Contains(a.body, "masked") {
			t.Errorf("PUT with another masked URL = %d %s, want 400 saying it is masked", a.status, a.body)
		}
		if a := ls.call(http.MethodPost, "/api/v1/alerts/rules", "otto", other); a.status != http.StatusBadRequest || !strings.Contains(a.body, "masked") {
			t.Errorf("POST with a masked URL = %d %s, want 400 saying it is masked", a.status, a.body)
		}
		if r, _ := ls.srv.store.AlertRule(t.Context(), 4); r.WebhookURL != slackURL {
			t.Errorf("after the refused PUT the webhook is %q", r.WebhookURL)
		}
	})
	t.Run("webhook URLs are never in the server log", func(t *testing.T) {
		logs := ls.logs.String()
		if !strings.Contains(logs, "alert webhook gave up") {
			t.Fatalf("the redirect's give-up is not logged:\n%s", logs)
		}
		for _, secret := range []string{"SECRET", "B000"} {
			if strings.Contains(logs, secret) {
				t.Errorf("the server log has %q:\n%s", secret, logs)
			}
		}
	})
}

func TestSecurityWebhooksToPrivateAddressesAreRefused(t *testing.T) {
	t.Parallel()
	rebound := newHook(t, false, "")
	// A rule whose host was public when it was saved and resolves to
	// loopback now (DNS rebinding): stored as it was accepted then.
	ls := startServer(t, nil, func(s *server) {
		if _, err := s.store.CreateAlertRule(t.Context(), cbdash.AlertRule{Name: "rebound", Service: "checkout", Breaker: "payments",
			Kind: cbdash.AlertOpen, WebhookURL: rebound.URL + "/hook"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a rule to a private destination is refused when saved", func(t *testing.T) {
		for _, u := range []string{rebound.URL + "/hook", "http://localhost:9/x", "http://[::1]/x", "http://169.254.169.254/latest/meta-data",
			"http://10.1.2.3/x", "http://192.168.0.1/x", "http://0.0.0.0:8080/x", "http://[::ffff:127.0.0.1]/x", "http://224.0.0.1/x"} {
			a := ls.call(http.MethodPost, "/api/v1/alerts/rules", "ada", ruleIn{"r", "checkout", "", cbdash.AlertOpen, u})
			if a.status != http.StatusBadRequest || !strings.Contains(a.body, "private") || !strings.Contains(a.body, "--allow-private-webhooks") {
				t.Errorf("rule to %s = %d %s, want 400 saying private and the flag", u, a.status, a.body)
			}
		}
	})
	t.Run("a delivery to an address that became private is refused at the connection", func(t *testing.T) {
		ls.trip()
		eventually.True(t, "the refused delivery logged", func() bool {
			return strings.Contains(ls.call(http.MethodGet, "/api/v1/alerts/deliveries?rule=1", "ada", nil).body, "private")
		})
		if got := rebound.got(); len(got) != 0 {
			t.Errorf("the private receiver was called: %v", got)
		}
	})
}

// page GETs path as a browser would (HTML) as user ("" = no credentials).
func (ls *liveServer) page(path, user string) answer {
	ls.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ls.srv.URL()+path, nil)
	req.Header.Set("Accept", "text/html")
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+ls.tokens[user])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ls.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, string(b)}
}

// Any part of a webhook URL after the host may be its secret: whatever
// the URL's shape, an anonymous visitor, a viewer and an operator see its
// scheme and host only, in the rules (API and Alerts page), the delivery
// log and the server's log; an admin sees it whole (issue 27, item 6).
func TestSecurityWebhookURLsAreMaskedEverywhere(t *testing.T) {
	t.Parallel()
	refusing := newHook(t, false, "http://127.0.0.1:9/elsewhere") // every delivery fails at once (a redirect is not followed)
	var failing atomic.Int64
	retrying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failing.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable) // retried after a backoff the virtual clock never reaches
	}))
	t.Cleanup(retrying.Close)
	host := strings.TrimPrefix(refusing.URL, "http://")
	hooks := [][2]string{ // rule name, webhook URL (in the order of their ids); every secret part says SECRET
		{"one segment", refusing.URL + "/SECRET-ONE"},
		{"three segments", refusing.URL + "/SECRET-SEG/SECRET-TWO/SECRET-THREE"},
		{"query", refusing.URL + "/SECRET-PATH?token=SECRET-QUERY"},
		{"query only", refusing.URL + "?SECRET-TOKEN"},
		{"user info", "http://SECRET-USER:SECRET-PASS@" + host + "/x"},
		{"fragment", refusing.URL + "/#SECRET-FRAG"},
		{"trailing slash", refusing.URL + "/SECRET-SLASH/"},
		{"one to retry", retrying.URL + "/SECRET-RETRY"},
	}
	urls := map[string]string{}
	for _, h := range hooks {
		urls[h[0]] = h[1]
	}
	ls := startServer(t, func(o *serveOptions) { o.AllowPrivateWebhooks, o.Anonymous = true, true }, nil)
	for _, h := range hooks {
		name, u := h[0], h[1]
		if a := ls.call(http.MethodPost, "/api/v1/alerts/rules", "otto", ruleIn{name, "checkout", "payments", cbdash.AlertOpen, u}); a.status != http.StatusCreated {
			t.Fatalf("create rule %s = %d %s", name, a.status, a.body)
		} else if strings.Contains(a.body, "SECRET") {
			t.Errorf("the operator's create answer shows the webhook URL: %s", a.body)
		}
	}
	ls.trip()
	eventually.True(t, "every failed delivery is in the log", func() bool {
		var ds []cbdash.AlertDelivery
		_ = json.Unmarshal([]byte(ls.call(http.MethodGet, "/api/v1/alerts/deliveries", "ada", nil).body), &ds)
		return len(ds) == len(urls)-1 && strings.Contains(ls.logs.String(), "alert webhook failed, retrying")
	})

	for _, user := range []string{"", "vera", "otto"} {
		who := map[string]string{"": "anonymous"}[user] + user
		for _, path := range []string{"/api/v1/alerts/rules", "/api/v1/alerts/rules/1", "/api/v1/alerts/deliveries", "/api/v1/alerts/deliveries?rule=2"} {
			a := ls.call(http.MethodGet, path, user, nil)
			if a.status != http.StatusOK || strings.Contains(a.body, "SECRET") || !strings.Contains(a.body, `"`+refusing.URL+`/…"`) {
				t.Errorf("%s: GET %s = %d %s, want 200 with the URLs as %s/…", who, path, a.status, a.body, refusing.URL)
			}
		}
		p := ls.page("/alerts", user)
		if p.status != http.StatusOK || strings.Contains(p.body, "SECRET") || !strings.Contains(p.body, refusing.URL+"/…") || !strings.Contains(p.body, "trailing slash") {
			t.Errorf("%s: the Alerts page = %d, want the rules with their URLs masked:\n%s", who, p.status, p.body)
		}
	}
	if p := ls.page("/alerts?edit=1", "otto"); strings.Contains(p.body, "SECRET") || !strings.Contains(p.body, "Edit rule 1") {
		t.Errorf("the operator's rule editor:\n%s", p.body)
	}

	var rules []ruleIn
	if err := json.Unmarshal([]byte(ls.call(http.MethodGet, "/api/v1/alerts/rules", "ada", nil).body), &rules); err != nil || len(rules) != len(urls) {
		t.Fatalf("the admin's rules: %v, %+v", err, rules)
	}
	for _, r := range rules {
		if r.WebhookURL != urls[r.Name] {
			t.Errorf("the admin sees rule %q's webhook as %q, want %q", r.Name, r.WebhookURL, urls[r.Name])
		}
	}
	var ds []cbdash.AlertDelivery
	_ = json.Unmarshal([]byte(ls.call(http.MethodGet, "/api/v1/alerts/deliveries", "ada", nil).body), &ds)
	for _, d := range ds {
		if !strings.Contains(d.URL, "SECRET") {
			t.Errorf("the admin's delivery log shows %q, want the whole URL", d.URL)
		}
	}
	if p := ls.page("/alerts", "ada"); !strings.Contains(p.body, "SECRET-ONE") {
		t.Error("the admin's Alerts page does not show the whole webhook URL")
	}

	logs := ls.logs.String()
	if n := strings.Count(logs, "alert webhook gave up"); n != len(urls)-1 {
		t.Errorf("%d give-ups logged, want %d:\n%s", n, len(urls)-1, logs)
	}
	if strings.Contains(logs, "SECRET") || !strings.Contains(logs, "url="+refusing.URL+"/…") || !strings.Contains(logs, "url="+retrying.URL+"/…") {
		t.Errorf("the server log shows a webhook's secret, or not its scheme and host:\n%s", logs)
	}
}
