package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// offScreen names the elements of sel whose box reaches past the
// viewport's right edge or is cut by a scrolling box ("" when none).
func offScreen(sel string) string {
	return `[...document.querySelectorAll("` + sel + `")].filter(e => {
		const r = e.getBoundingClientRect();
		if (r.right > document.documentElement.clientWidth + 1 || r.left < -1) return true;
		const box = e.closest(".scroll");
		if (!box) return false;
		const b = box.getBoundingClientRect();
		return r.right > b.right + 1 || r.left < b.left - 1;
	}).map(e => e.textContent.trim().slice(0, 40) + " (" + Math.round(e.getBoundingClientRect().left) + "-" + Math.round(e.getBoundingClientRect().right) + ")").join(", ")`
}

// TestBrowserPhoneShowsWhatMatters: at 390 px the incident list shows
// each incident's start in full on a row of reasonable height, the holds
// list shows what each hold holds, and the timeline keeps a readable
// scale (its lane titles at least 9 px high), scrolling in its own box.
func TestBrowserPhoneShowsWhatMatters(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 3)
	bg := context.Background()
	trip(t, s.breakers["checkout-2"]) // before the hold below forces it open
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	if _, err := s.st.CreateIncident(bg, cbdash.Incident{DependencyKey: k, Start: s.clock.Now().Add(-time.Minute), Open: true,
		Instances: []string{"checkout-1", "checkout-2", "checkout-3"}, Opens: 6, FirstInstance: "checkout-1",
		FirstCause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 50, Threshold: 50, WindowCalls: 20, WindowFailed: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.col.CreateHold(bg, cbdash.Actor{Name: "otto"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "*", Breaker: "payments", Labels: map[string]string{"zone": "a"}},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill the payments fallback on a phone"}); err != nil {
		t.Fatal(err)
	}
	login(t, ctx, s.url, "otto", s.password)
	run(t, ctx, stepTimeout, "a phone", narrow(390))

	run(t, ctx, stepTimeout, "incidents", chromedp.Navigate(s.url+"/incidents"), chromedp.WaitVisible(css(`[data-testid=incident-row]`)))
	if off := get(t, ctx, "incident starts", chromedp.Evaluate[string](offScreen(`[data-testid=incident-start]`))); off != "" {
		t.Errorf("an incident's start is cut at 390 px: %s", off)
	}
	if h := get(t, ctx, "row height", chromedp.Evaluate[float64](`Math.max(...[...document.querySelectorAll("[data-testid=incident-row]")].map(r => r.getBoundingClientRect().height))`)); h > 150 {
		t.Errorf("an incident row is %.0f px tall at 390 px, want at most 150", h)
	}
	screenshot(t, ctx, "incidents-390.png")

	run(t, ctx, stepTimeout, "holds", chromedp.Navigate(s.url+"/holds"), chromedp.WaitVisible(css(`[data-testid=hold-row]`)))
	if off := get(t, ctx, "hold selectors", chromedp.Evaluate[string](offScreen(`[data-testid=hold-selector], [data-testid=hold-expiry], [data-testid=hold-status]`))); off != "" {
		t.Errorf("what a hold holds is cut at 390 px: %s", off)
	}
	screenshot(t, ctx, "holds-390.png")

	run(t, ctx, stepTimeout, "timeline", chromedp.Navigate(s.url+"/timeline?range=15m"), chromedp.WaitVisible(css(`[data-testid=lane]`)))
	if h := get(t, ctx, "lane title height", chromedp.Evaluate[float64](`document.querySelector("svg.timeline .lane-title").getBoundingClientRect().height`)); h < 9 {
		t.Errorf("the timeline's lane titles are %.1f px high at 390 px, want at least 9", h)
	}
	for _, p := range []string{"/incidents", "/holds", "/timeline?range=15m"} {
		run(t, ctx, stepTimeout, p, chromedp.Navigate(s.url+p), chromedp.WaitVisible(css(`h1`)))
		if o := get(t, ctx, "overflow of "+p, chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("%s at 390 px scrolls sideways: %s", p, o)
		}
	}
	screenshot(t, ctx, "timeline-390.png")
}
