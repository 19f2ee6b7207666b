package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingestClimbing reports, over the ingest API, instance's last 180 s of
// checkout/payments (live settings: 50% of 100 calls, at least 20): 20
// calls a second, none failing for a minute, then a failure rate
// climbing 2 points a second: the demo's climbing dependency.
func ingestClimbing(t *testing.T, h *harness, instance string) {
	t.Helper()
	now := h.clock.Now().Truncate(time.Second)
	var ws []protocol.Window
	for i := range 180 {
		fail := int64(0)
		if i >= 60 {
			fail = min(20, int64(i-60)*2/5)
		}
		ws = append(ws, protocol.Window{Breaker: "payments", State: protocol.StateClosed, Start: now.Add(time.Duration(i-180) * time.Second).UnixMilli(),
			Millis: 1000, Counts: protocol.Counts{Admitted: 20, Successes: 20 - fail, Failures: fail, Errors: fail}})
	}
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: instance, SDKVersion: "test", StartedAt: 1,
			Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50,
				SlowCallRateThreshold: 100, MinimumCalls: 20, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Windows: ws},
	}
	if instance == "checkout-1" { // its breaker tripped 30 s ago and is still open
		req.Batch.Transitions = []protocol.Transition{{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen,
			At: now.Add(-30 * time.Second).UnixMilli(), Generation: 2, Cause: protocol.Cause{Kind: protocol.CauseFailureRate}, OpenMillis: 60_000}}
	}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, h.url+"/api/v1/ingest", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+h.stack.AgentToken)
	hr.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("ingest: %d", res.StatusCode)
	}
}

// TestBrowserTunePanelShowsAnEarlierTripForALowerThreshold drives the
// dependency page's Tune panel: on a climbing dependency, a candidate
// with a lower threshold trips earlier than the live settings, in the
// table and on the replayed lanes.
func TestBrowserTunePanelShowsAnEarlierTripForALowerThreshold(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	h := newHarness(t, web.Config{})
	ingestClimbing(t, h, "checkout-1")
	ingestClimbing(t, h, "checkout-2")
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.True(t, "the history stored", func() bool {
		pts, err := h.st.History(t.Context(), cbdash.HistoryQuery{DependencyKey: k, From: h.clock.Now().Add(-time.Hour), To: h.clock.Now()})
		return err == nil && len(pts) == 180 && pts[179].Reports == 2
	})
	login(t, ctx, h.url, "vera", "password-vera")
	from := h.clock.Now().Add(-5 * time.Minute).UTC().Format(time.RFC3339)
	run(t, ctx, stepTimeout, "replay a candidate in the Tune panel",
		chromedp.Navigate(h.url+"/dependency?service=checkout&breaker=payments&range=15m"),
		chromedp.WaitVisible(css(`[data-testid=tune-form]`)),
		chromedp.SetValue(css(`[data-testid=tune-from]`), from),
		chromedp.SetValue(css(`[data-testid=tune-candidate]`), "failure-rate=20"),
		chromedp.Click(css(`[data-testid=tune-run]`)),
		chromedp.WaitVisible(css(`[data-testid=tune-table]`)),
	)
	trips := get(t, ctx, "first trips", chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll("[data-testid=tune-row]")].map(r => [r.dataset.label, r.dataset.firstTrip]))`))
	live, cand := trips["live"], trips["failure-rate=20"]
	if live == "" || cand == "" || cand >= live {
		t.Errorf("first trips %v: want the candidate's (failure-rate=20) before the live settings'", trips)
	}
	lanes := get(t, ctx, "lanes", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("svg.tune-lane.replayed")].map(l => l.dataset.label + ":" + (l.querySelector("rect[data-state=open]") ? Number(l.querySelector("rect[data-state=open]").getAttribute("x")).toFixed(0) : "none"))`))
	if len(lanes) != 2 || strings.HasSuffix(lanes[0], "none") || strings.HasSuffix(lanes[1], "none") {
		t.Errorf("lanes %v: want an open stretch on both", lanes)
	}
	recorded := get(t, ctx, "recorded lane", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("svg.tune-lane.recorded rect")].map(r => r.dataset.state + ":" + Number(r.getAttribute("x")).toFixed(0))`))
	if len(recorded) != 1 || !strings.HasPrefix(recorded[0], "open:") {
		t.Errorf("recorded lane %v: want checkout-1's open stretch", recorded)
	}
	screenshot(t, ctx, "dependency-tune.png")

	run(t, ctx, stepTimeout, "ask for the review",
		chromedp.Click(css(`[data-testid=review-link]`)),
		chromedp.WaitVisible(css(`[data-testid=review]`)),
	)
	verdicts := get(t, ctx, "verdicts", chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll("[data-testid=review-answer]")].map(a => [a.dataset.key, a.dataset.verdict]))`))
	if len(verdicts) != 7 || verdicts["slow_calls"] != "no" || verdicts["rate_window"] != "yes" || verdicts["visible"] != "yes" {
		t.Errorf("review verdicts %v: want 7, slow calls no (no timeout), rate window and visible yes", verdicts)
	}
}
