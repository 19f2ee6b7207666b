package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// shadowStack is the real stack (store on SQLite or PostgreSQL, the
// collector, the dashboard, the alert service and an incident service,
// on one running clock) with two real agents, checkout-1 and checkout-2,
// each reporting a real payments breaker (50 % of 20 calls, at least 10)
// that carries the shadow configuration "tight" (20 % of the same).
// Checkout-1 sees a 20 % failure rate: its shadow would have opened, its
// breaker did not. Then checkout-2's breaker trips for real. An alert
// rule on payments' opens posts to hooks.
type shadowStack struct {
	*harness
	k         cbdash.DependencyKey
	hooks     *hookLog
	shadowAt  time.Time // checkout-1's shadow trip, by the breakers' clock
	incidents *incident.Service
}

// hookLog counts the alert webhook's calls by event.
type hookLog struct {
	mu     sync.Mutex
	events []string
}

func (l *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	l.mu.Lock()
	l.events = append(l.events, fmt.Sprint(m["event"]))
	l.mu.Unlock()
}

func (l *hookLog) count(event string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e == event {
			n++
		}
	}
	return n
}

func startShadowStack(t *testing.T) *shadowStack {
	t.Helper()
	ctx := context.Background()
	h := start(t, web.Config{LiveInterval: 100 * time.Millisecond}, clocktest.NewRunning())
	h.addUser("vera", cbdash.RoleViewer, "password-vera")
	s := &shadowStack{harness: h, k: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}, hooks: &hookLog{}}
	hook := httptest.NewServer(s.hooks)
	t.Cleanup(hook.Close)
	if _, err := h.stack.Alerts.CreateRule(ctx, cbdash.AlertRule{Name: "payments open", Service: "checkout", Breaker: "payments",
		Kind: cbdash.AlertOpen, Format: cbdash.FormatJSON, WebhookURL: hook.URL + "/hook"}); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.incidents, err = incident.NewService(incident.ServiceConfig{Source: h.col, Store: h.st, Clock: h.clock}); err != nil {
		t.Fatal(err)
	}
	ictx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.incidents.Run(ictx) }()
	t.Cleanup(func() { stop(); <-done })

	brs := map[string]*breaker.Breaker{}
	for _, inst := range []string{"checkout-1", "checkout-2"} {
		b, err := breaker.New("payments", breaker.Config{
			Window: breaker.Window{Size: 20}, MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: time.Hour, Clock: h.clock,
			Shadows: []breaker.Shadow{{Name: "tight", Config: breaker.Config{Window: breaker.Window{Size: 20}, MinimumCalls: 10, FailureRateThreshold: 20, OpenDuration: time.Hour}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Config{URL: h.stack.AgentURL(), Token: h.stack.AgentToken, Service: "checkout", Instance: inst,
			ReportInterval: 100 * time.Millisecond, Clock: h.clock})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(b); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // before the harness's: agents leave first
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Close(cctx)
		})
		brs[inst] = b
	}
	call := func(b *breaker.Breaker, err error) {
		if got := b.Execute(ctx, func(context.Context) error { return err }); got != err {
			t.Fatalf("call: %v, want %v (nothing rejected)", got, err)
		}
	}
	tripped := make(chan breaker.Transition, 1)
	cancel := brs["checkout-1"].SubscribeShadows(func(tr breaker.Transition) { tripped <- tr })
	for i := range 10 { // 2 of 10 fail: 20 %
		var err error
		if i%5 == 4 {
			err = errBoom
		}
		call(brs["checkout-1"], err)
	}
	cancel()
	s.shadowAt = (<-tripped).At
	if st := brs["checkout-1"].State(); st != breaker.Closed {
		t.Fatalf("checkout-1's live breaker: %v, want closed", st)
	}
	eventually.True(t, "checkout-1's shadow trip stored", func() bool {
		trs, err := h.st.ShadowTransitions(ctx, cbdash.TransitionQuery{Service: "checkout", Breaker: "payments"})
		return err == nil && len(trs) == 1
	})
	// The collector applied that batch before it stored it: the live
	// state saw nothing of the shadow.
	d, err := h.col.Dependency(s.k)
	if err != nil || d.State != protocol.StateClosed || d.ByState[protocol.StateOpen] != 0 {
		t.Fatalf("after checkout-1's shadow trip: %+v, %v: want every instance closed", d, err)
	}
	for range 10 { // checkout-2 trips for real (and so does its shadow)
		call(brs["checkout-2"], errBoom)
	}
	if !eventually.Wait(eventually.Timeout, func() bool {
		incs, err := h.st.Incidents(ctx, cbdash.IncidentQuery{Service: "checkout", Breaker: "payments"})
		return err == nil && len(incs) == 1 && s.hooks.count(cbdash.AlertFiring) >= 1
	}) {
		incs, err := h.st.Incidents(ctx, cbdash.IncidentQuery{Service: "checkout", Breaker: "payments"})
		s.hooks.mu.Lock()
		defer s.hooks.mu.Unlock()
		t.Fatalf("checkout-2's incident and alert: incidents %+v (%v), webhook events %v", incs, err, s.hooks.events)
	}
	eventually.True(t, "both shadow trips stored", func() bool {
		trs, err := h.st.ShadowTransitions(ctx, cbdash.TransitionQuery{Service: "checkout", Breaker: "payments"})
		return err == nil && len(trs) == 2
	})
	return s
}

var errBoom = fmt.Errorf("payments down")

// A shadow configuration's would-be trip goes through the real agent and
// collector into the store, marked as shadow, and is shown as one; it
// changes no live state, opens no incident, fires no alert and is no
// trip: only checkout-2's real trip does any of that.
func TestShadowTripStoredShownNotEnforced(t *testing.T) {
	t.Parallel()
	s := startShadowStack(t)
	ctx := context.Background()
	incs, err := s.st.Incidents(ctx, cbdash.IncidentQuery{Service: "checkout", Breaker: "payments"})
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v, %v", incs, err)
	}
	if inc := incs[0]; inc.FirstInstance != "checkout-2" || inc.Opens != 1 || strings.Join(inc.Instances, ",") != "checkout-2" || inc.Start.Before(s.shadowAt) {
		t.Fatalf("incident %+v: want checkout-2's trip only (the shadow trip of checkout-1 at %v is none)", inc, s.shadowAt)
	}
	if n := s.hooks.count(cbdash.AlertFiring); n != 1 {
		t.Fatalf("%d firing alerts, want checkout-2's one", n)
	}
	live, err := s.st.Transitions(ctx, cbdash.TransitionQuery{Service: "checkout", Breaker: "payments"})
	if err != nil || len(live) != 1 || live[0].Instance != "checkout-2" || live[0].Shadow != "" {
		t.Fatalf("live transitions %+v, %v: want checkout-2's trip", live, err)
	}
	opens, err := s.st.OpensSince(ctx, s.shadowAt.Add(-time.Minute))
	if err != nil || opens[s.k] != 1 {
		t.Fatalf("opens %v, %v: want 1", opens, err)
	}
	d, err := s.col.Dependency(s.k)
	if err != nil || d.ByState[protocol.StateOpen] != 1 || d.ByState[protocol.StateClosed] != 1 {
		t.Fatalf("dependency by state %v, %v: want checkout-1 closed, checkout-2 open", d.ByState, err)
	}
	for _, ib := range d.PerInstance {
		if ib.Config == nil || len(ib.Config.Shadows.List()) != 1 || ib.Config.Shadows.List()[0].FailureRateThreshold != 20 {
			t.Fatalf("%s reported settings %+v: want the shadow tight at 20 %%", ib.Instance, ib.Config)
		}
	}

	c := s.login("vera")
	var got []cbdash.TransitionRecord
	if r := c.get("/api/v1/transitions?service=checkout&breaker=payments"); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &got) != nil || len(got) != 1 || strings.Contains(r.body, "shadow") {
		t.Fatalf("transitions API: %d %s: want the live trip only, as before", r.status, r.body)
	}
	if r := c.get("/api/v1/transitions?service=checkout&breaker=payments&shadow=true"); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &got) != nil || len(got) != 2 || got[0].Shadow != "tight" || got[1].Shadow != "tight" {
		t.Fatalf("transitions API, shadow=true: %d %s", r.status, r.body)
	}
	if r := c.get("/api/v1/transitions?shadow=maybe"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "shadow must be true or false") {
		t.Fatalf("transitions API, shadow=maybe: %d %s", r.status, r.body)
	}
	var rep tune.Report
	if r := c.get("/api/v1/breakers/checkout/payments/replay"); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &rep) != nil {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if len(rep.Runs) < 2 || rep.Runs[1].Label != "shadow: tight" || rep.Runs[1].Shadow != "tight" || rep.Runs[1].Settings.FailureRateThreshold != 20 ||
		rep.Runs[1].RecordedTrips == nil || *rep.Runs[1].RecordedTrips != 2 {
		t.Fatalf("replay runs %+v: want the shadow's run second, with its 2 recorded would-be trips", rep.Runs)
	}
	page := c.get("/dependency?service=checkout&breaker=payments&range=15m")
	for _, want := range []string{"Shadow settings", "shadow: tight (would have opened at " + s.shadowAt.UTC().Format("15:04:05"), "shadow tight, not enforced"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the dependency page lacks %q", want)
		}
	}
}

// The dependency page draws the shadow's lane under the recorded one and
// marks its transitions as not enforced, at 1440 and at 390 px, with
// nothing wider than the screen.
func TestBrowserDependencyPageShowsShadowLanes(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startShadowStack(t)
	login(t, ctx, s.url, "vera", "password-vera")
	for _, width := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, fmt.Sprintf("the dependency page at %d px", width),
			narrow(width),
			chromedp.Navigate(s.url+"/dependency?service=checkout&breaker=payments&range=15m"),
			chromedp.WaitVisible(css(`[data-testid=shadow-lane]`)),
		)
		geo := get(t, ctx, "shadow lane geometry", chromedp.Evaluate[map[string]any](`(() => {
			const row = document.querySelector("[data-testid=shadow-lane]");
			const label = row.querySelector(".tune-lane-label"), lane = row.querySelector("svg.tune-lane.shadow");
			const rec = document.querySelector("[data-testid=shadow-lanes] svg.tune-lane.recorded");
			const l = label.getBoundingClientRect(), s = lane.getBoundingClientRect(), r = rec.getBoundingClientRect();
			const open = lane.querySelector("rect[data-state=open]");
			return {label: label.textContent.trim(), laneW: s.width, laneRight: s.right, laneTop: s.top, recTop: r.top, recLeft: r.left, laneLeft: s.left,
				labelRight: l.right, labelTop: l.top, labelBottom: l.bottom, laneBottom: s.bottom, open: open ? Number(open.getAttribute("width")) : -1, vw: document.documentElement.clientWidth,
				marks: [...document.querySelectorAll("[data-testid=transition-row][data-shadow=tight] [data-testid=shadow-mark]")].map(m => m.textContent.trim()),
				live: document.querySelectorAll("[data-testid=transition-row][data-shadow='']").length};
		})()`))
		if !strings.HasPrefix(fmt.Sprint(geo["label"]), "shadow: tight (would have opened at ") {
			t.Errorf("%d px: shadow lane label %q", width, geo["label"])
		}
		if geo["open"].(float64) <= 0 {
			t.Errorf("%d px: the shadow lane has no open stretch: %v", width, geo)
		}
		if geo["laneW"].(float64) < 100 || geo["laneRight"].(float64) > geo["vw"].(float64) {
			t.Errorf("%d px: the shadow lane is %.0f px wide, ends at %.0f of %.0f", width, geo["laneW"], geo["laneRight"], geo["vw"])
		}
		if geo["laneTop"].(float64) <= geo["recTop"].(float64) || geo["laneLeft"] != geo["recLeft"] {
			t.Errorf("%d px: the shadow lane is not under the recorded lane: %v", width, geo)
		}
		switch {
		case width >= 1000 && (geo["labelRight"].(float64) > geo["laneLeft"].(float64) || geo["labelTop"].(float64) > geo["laneBottom"].(float64)):
			t.Errorf("%d px: the label is not beside its lane: %v", width, geo)
		case width < 1000 && (geo["labelBottom"].(float64) > geo["laneTop"].(float64) || geo["laneW"].(float64) < 300):
			t.Errorf("%d px: the label is not above a lane across the screen: %v", width, geo)
		}
		if marks := geo["marks"].([]any); len(marks) != 2 || marks[0] != "shadow tight, not enforced" {
			t.Errorf("%d px: shadow marks in the transitions %v, want 2 'shadow tight, not enforced'", width, marks)
		}
		if geo["live"].(float64) != 1 {
			t.Errorf("%d px: %v live transition rows, want 1", width, geo["live"])
		}
		if off := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); off != "" {
			t.Errorf("%d px: wider than the screen: %s", width, off)
		}
		run(t, ctx, stepTimeout, "scroll to the shadows", chromedp.ScrollIntoView(css(`[data-testid=shadows]`)))
		screenshot(t, ctx, fmt.Sprintf("dependency-shadows-%d.png", width))
		if dir := os.Getenv("CBDASH_SCREENSHOTS"); dir != "" { // the section itself, at full size
			png := get(t, ctx, "screenshot of the shadows", chromedp.Screenshot(css(`[data-testid=shadows]`)))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("dependency-shadows-section-%d.png", width)), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
