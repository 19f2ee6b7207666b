package web_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestTheDependencyPageDrawsLostDataAsAGap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	now := h.clock.Now().Truncate(time.Second)
	var b protocol.Batch
	for i := range 60 {
		if i >= 20 && i < 40 { // the agent dropped these reports
			continue
		}
		at := now.Add(time.Duration(i-60) * time.Second)
		b.Windows = append(b.Windows, protocol.Window{Breaker: "payments", Start: at.UnixMilli(), Millis: 1000,
			State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 10, Successes: 10}})
	}
	b.Dropped = &protocol.Dropped{Windows: 1, Calls: 200, Lost: []protocol.LostSpan{{Breaker: "payments",
		Start: now.Add(-40 * time.Second).UnixMilli(), End: now.Add(-20 * time.Second).UnixMilli(), Calls: 200}}}
	h.ingest("checkout", "checkout-1", b)

	c := h.login("vera")
	body := c.get("/dependency?service=checkout&breaker=payments&range=15m").body
	charts := strings.Count(body, `data-testid="chart"`)
	if n := strings.Count(body, `data-testid="data-lost"`); charts == 0 || n != charts {
		t.Fatalf("%d data-lost bands on %d charts, want one on each", n, charts)
	}
	for _, want := range []string{
		">data lost</text>",
		"the agent of checkout-1 dropped its reports under memory pressure (200 calls not in the charts)",
		"data lost: 200 calls of 1 gap(s) not shown", // in the tooltip of the columns it covers
		`fill="url(#chart-requests-hatch)"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("dependency page lacks %q", want)
		}
	}
	before := c.get("/dependency?service=checkout&breaker=payments&range=15m&end=" + strconv.FormatInt(now.Add(-5*time.Minute).Unix(), 10))
	if before.status != 200 || !strings.Contains(before.body, `data-testid="chart"`) || strings.Contains(before.body, `data-testid="data-lost"`) {
		t.Errorf("a range before the gap: status %d, draws it %v", before.status, strings.Contains(before.body, `data-testid="data-lost"`))
	}
}

func TestTheDependencyPageShowsMisuseOnlyWhenThereIsSome(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	c := h.login("vera")
	if body := c.get("/dependency?service=checkout&breaker=payments&range=15m").body; strings.Contains(body, `data-testid="misuse"`) {
		t.Fatal("misuse shown without any")
	}
	now := h.clock.Now().Truncate(time.Second)
	h.ingest("checkout", "checkout-1", protocol.Batch{Windows: []protocol.Window{{Breaker: "payments",
		Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateClosed,
		Counts: protocol.Counts{Admitted: 5, Successes: 5, Misuse: 3}}}})
	body := c.get("/dependency?service=checkout&breaker=payments&range=15m").body
	if !strings.Contains(body, `data-testid="misuse"`) || !strings.Contains(body, "misuse 3</span>") {
		t.Fatal("the dependency page does not show 3 misuses")
	}
	res := c.get("/api/v1/breakers/checkout/payments/history?resolution=second")
	if res.status != 200 || !strings.Contains(res.body, `"misuse":3`) {
		t.Fatalf("history API: %d %s, want the misuse count", res.status, res.body)
	}
}
