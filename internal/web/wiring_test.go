package web_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOptionalServicesOffAnswerAsDocumented builds the dashboard with every
// optional service of web.Config nil: New logs each feature off once, the
// features' routes answer as Config documents them (404 with the reason,
// no heatmap, no fleet line, a revoke that closes no connection), and
// every other page and API route still works.
func TestOptionalServicesOffAnswerAsDocumented(t *testing.T) {
	var logs syncBuffer
	clk := clocktest.Virtual()
	h := &harness{t: t, clock: clk, users: map[string]string{}, reported: map[string]reported{}}
	h.run(stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.PublishInterval = 20 * time.Millisecond },
		Web: func(w *web.Config) {
			c := *w
			c.Holds, c.Incidents, c.Alerts, c.InstanceHistory, c.FleetHistory, c.AgentSessions, c.Schedules = nil, nil, nil, nil, nil, nil, nil
			c.ShadowHistory = nil
			c.LiveInterval, c.Logger = 20*time.Millisecond, slog.New(slog.NewJSONHandler(&logs, nil))
			*w, h.cfg = c, c
		}})
	for _, f := range []string{"holds", "drill schedules", "incidents", "alerts", "heatmap", "fleet line", "closing a revoked agent token's connections", "shadow transitions"} {
		if n := strings.Count(logs.String(), `"msg":"dashboard feature off","feature":"`+f+`"`); n != 1 {
			t.Errorf("feature %q logged off %d times at New, want once:\n%s", f, n, logs.String())
		}
	}
	h.addUser("vera", cbdash.RoleViewer, "password-vera")
	h.addUser("ada", cbdash.RoleAdmin, "password-ada")
	h.fleet(dep("checkout", "payments", 2, 1))
	vera := h.login("vera")

	for _, c := range []struct {
		path   string
		status int
		want   string // in the body; "" = anything
		absent string // not in the body
	}{
		{"/holds", http.StatusNotFound, "holds are not kept by this server", ""},
		{"/holds/h-1", http.StatusNotFound, "holds are not kept by this server", ""},
		{"/api/v1/holds", http.StatusNotFound, "holds are not kept by this server", ""},
		{"/api/v1/schedules", http.StatusNotFound, "drill schedules are not kept by this server", ""},
		{"/incidents", http.StatusNotFound, "incidents are not recorded by this server", ""},
		{"/api/v1/incidents", http.StatusNotFound, "incidents are not recorded by this server", ""},
		{"/alerts", http.StatusNotFound, "", ""},
		{"/api/v1/alerts", http.StatusNotFound, "", ""},
		{"/overview/fleet-timeline", http.StatusNotFound, "this server keeps no per-instance history", ""},
		// The other pages and API routes still work.
		{"/", http.StatusOK, "payments", `data-testid="fleet-timeline"`},
		{"/dependency?service=checkout&breaker=payments", http.StatusOK, "checkout-1", `data-testid="heatmap"`},
		{"/timeline", http.StatusOK, "checkout", ""},
		{"/audit", http.StatusOK, "", ""},
		{"/api/v1/breakers", http.StatusOK, `"breaker":"payments"`, ""},
		{"/api/v1/breakers/checkout/payments/history", http.StatusOK, "", ""},
	} {
		r := vera.get(c.path)
		if r.status != c.status || !strings.Contains(r.body, c.want) || (c.absent != "" && strings.Contains(r.body, c.absent)) {
			t.Errorf("GET %s: %d, want %d with %q and without %q:\n%.400s", c.path, r.status, c.status, c.want, c.absent, r.body)
		}
	}

	// Without AgentSessions an agent token is revoked in the store alone.
	_, ref, err := h.st.IssueAgentToken(context.Background(), "ada", "checkout", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r := h.login("ada").postForm("/admin/tokens/revoke", url.Values{"ref": {ref}})
	loc, _ := url.QueryUnescape(r.header.Get("Location"))
	if r.status != http.StatusSeeOther || !strings.HasSuffix(loc, "Agent token "+ref+" is revoked.") {
		t.Errorf("revoke %s: %d to %q, want 303 to \"Agent token %s is revoked.\"", ref, r.status, loc, ref)
	}
}

// TestNewRefusesAConfigWithoutARequiredService checks New names the
// missing required service rather than serving pages that fail later.
func TestNewRefusesAConfigWithoutARequiredService(t *testing.T) {
	st := stacktest.Start(t, stacktest.Options{Clock: clocktest.Virtual()})
	full := web.Config{Collector: st.Collector, History: st.Store, Sessions: st.Store, Accounts: st.Store}
	if _, err := web.New(full); err != nil {
		t.Fatalf("New with the required services: %v", err)
	}
	for field, unset := range map[string]func(*web.Config){
		"Collector": func(c *web.Config) { c.Collector = nil },
		"History":   func(c *web.Config) { c.History = nil },
		"Sessions":  func(c *web.Config) { c.Sessions = nil },
		"Accounts":  func(c *web.Config) { c.Accounts = nil },
	} {
		c := full
		unset(&c)
		if _, err := web.New(c); err == nil || !strings.Contains(err.Error(), "Config."+field+" is required") {
			t.Errorf("New without %s: %v, want \"Config.%s is required\"", field, err, field)
		}
	}
	for _, cost := range []int{3, 32} {
		c := full
		c.PasswordCost = cost
		if _, err := web.New(c); err == nil || !strings.Contains(err.Error(), "PasswordCost") {
			t.Errorf("New with PasswordCost %d: %v, want it refused", cost, err)
		}
	}
}
