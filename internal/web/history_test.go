package web_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// seed reports, through the ingest API, a minute of one-second windows of
// instance inst of checkout/payments ending now, with a closed > open >
// half_open run.
func seed(t *testing.T, h *harness, inst string) {
	t.Helper()
	now := h.clock.Now()
	var b protocol.Batch
	lat := make([]int64, protocol.NumLatencyBuckets)
	lat[4] = 10
	for i := range 60 {
		at := now.Add(time.Duration(i-60) * time.Second).Truncate(time.Second)
		state := protocol.StateClosed // as the transitions below say
		switch {
		case i >= 35:
			state = protocol.StateHalfOpen
		case i >= 30:
			state = protocol.StateOpen
		}
		b.Windows = append(b.Windows, protocol.Window{Breaker: "payments", Start: at.UnixMilli(), Millis: 1000, State: state,
			Counts: protocol.Counts{Admitted: 10, Successes: 6, Failures: 4, Errors: 4}, Latency: lat, LatencySumMs: 200})
	}
	b.Transitions = []protocol.Transition{
		{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: now.Add(-30 * time.Second).UnixMilli(), Generation: 2,
			OpenMillis: 5000, Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50, WindowCalls: 20, WindowFailed: 11}},
		{Breaker: "payments", From: protocol.StateOpen, To: protocol.StateHalfOpen, At: now.Add(-25 * time.Second).UnixMilli(), Generation: 3,
			Cause: protocol.Cause{Kind: protocol.CauseOpenElapsed}},
	}
	h.ingest("checkout", inst, b)
}

func TestPagesReadTheStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	now := h.clock.Now()
	seed(t, h, "checkout-1")
	c := h.login("vera")

	t.Run("dependency page: charts and transitions with causes", func(t *testing.T) {
		body := c.get("/dependency?service=checkout&breaker=payments&range=15m").body
		for _, want := range []string{
			"failure rate 55% reached the 50% threshold (11 of 20 calls failed); opens for 5s",
			"open duration passed, probing", "checkout-1",
			`class="line c5"`, // the successes series is drawn
			"failures: 4.00 calls/s",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("dependency page lacks %q", want)
			}
		}
		if strings.Contains(body, "no data in this range") {
			t.Error("a chart says no data")
		}
	})
	t.Run("timeline: a lane that links to the dependency at that moment", func(t *testing.T) {
		body := c.get("/timeline?range=15m").body
		if !strings.Contains(body, `data-testid="lane"`) || !strings.Contains(body, "checkout/payments") {
			t.Fatalf("no lane for checkout/payments")
		}
		if !strings.Contains(body, "open on 1 of 2") || !strings.Contains(body, "half-open on 1 of 2") {
			t.Errorf("lane lacks its stretches")
		}
		if !strings.Contains(body, "/dependency?service=checkout&amp;breaker=payments&amp;end=") {
			t.Errorf("segments do not link to the dependency at that moment")
		}
	})
	t.Run("a range in the past shows that moment", func(t *testing.T) {
		end := strconv.FormatInt(now.Add(-2*time.Hour).Unix(), 10)
		body := c.get("/dependency?service=checkout&breaker=payments&range=15m&end=" + end).body
		if strings.Contains(body, "open duration passed") || !strings.Contains(body, "No transition in this range") {
			t.Error("transitions outside the range are shown")
		}
	})
}
