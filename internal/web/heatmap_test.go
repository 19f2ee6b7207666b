package web_test

import (
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestHeatmapPaginatesWorstFirst: 60 instances, the first three open:
// page one holds 50 rows starting with the open ones, page two the last
// 10.
func TestHeatmapPaginatesWorstFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 60, 3))
	vera := h.login("vera")
	rows := regexp.MustCompile(`data-testid="heat-row" data-instance="([^"]+)"`)
	page := vera.get("/dependency?service=checkout&breaker=payments").body
	first := rows.FindAllStringSubmatch(page, -1)
	if len(first) != 50 {
		t.Fatalf("page one has %d rows, want 50", len(first))
	}
	for i, want := range []string{"checkout-1", "checkout-2", "checkout-3"} {
		if first[i][1] != want {
			t.Errorf("row %d is %s, want the open %s", i, first[i][1], want)
		}
	}
	if !strings.Contains(page, "instances 1-50 of 60") || !strings.Contains(page, `data-testid="heat-next"`) {
		t.Fatalf("page one lacks its count or next link")
	}
	next := regexp.MustCompile(`href="([^"]+)" data-testid="heat-next"`).FindStringSubmatch(page)[1]
	second := vera.get(strings.ReplaceAll(next, "&amp;", "&")).body
	if n := len(rows.FindAllString(second, -1)); n != 10 || !strings.Contains(second, "instances 51-60 of 60") || !strings.Contains(second, `data-testid="heat-prev"`) {
		t.Errorf("page two has %d rows (want 10) or lacks its count or previous link", n)
	}
	if strings.Contains(second, `data-testid="heat-next"`) {
		t.Error("the last page links a next one")
	}
}

// TestHeatmapSaysTimeNotClosed is finding 9 of the demo trial: an
// instance that opens for 10 s at the start of each of 10 minutes and is
// closed the other 50 s was said to be "10 min not closed" (every
// minute's worst state is open), beside a chart of instances not closed
// that alternates. Its row now says the time, 1m40s, and in how many
// minutes; an instance always closed says nothing of it.
func TestHeatmapSaysTimeNotClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	clk := h.virtual()
	clk.Advance(time.Minute - clk.Now().Sub(clk.Now().Truncate(time.Minute))) // a minute's start
	for range 10 {
		for s := 0; s < 60; s += 5 {
			state := protocol.StateClosed
			if s < 10 {
				state = protocol.StateOpen
			}
			clk.Advance(5 * time.Second)
			if s == 10 { // closes again: through half-open, at once
				closeAgain(h, "checkout", "payments", "checkout-1")
			}
			h.report("checkout", "payments", "checkout-1", state)
			h.report("checkout", "payments", "checkout-2", protocol.StateClosed)
		}
	}
	page := h.login("vera").get("/dependency?service=checkout&breaker=payments").body
	sum := regexp.MustCompile(`data-instance="(checkout-\d)"[^>]*>\s*<div class="heat-title" title="([^"]*)"`)
	got := map[string]string{}
	for _, m := range sum.FindAllStringSubmatch(page, -1) {
		got[m[1]] = html.UnescapeString(m[2])
	}
	if s := got["checkout-1"]; !strings.Contains(s, ", not closed 1m40s in 10 min") {
		t.Errorf("checkout-1's summary %q, want the 1m40s not closed, in 10 minutes", s)
	}
	if s, ok := got["checkout-2"]; !ok || strings.Contains(s, "not closed") {
		t.Errorf("checkout-2's summary %q (shown %v), want no time not closed", s, ok)
	}
}

// closeAgain ingests instance's open breaker going half-open and then
// closed half a second ago (the harness's report carries only trips).
func closeAgain(h *harness, service, breaker, instance string) {
	h.t.Helper()
	at := h.clock.Now().Add(-500 * time.Millisecond).UnixMilli()
	h.ingest(service, instance, protocol.Batch{Transitions: []protocol.Transition{
		{Breaker: breaker, From: protocol.StateOpen, To: protocol.StateHalfOpen, At: at, Cause: protocol.Cause{Kind: protocol.CauseOpenElapsed}},
		{Breaker: breaker, From: protocol.StateHalfOpen, To: protocol.StateClosed, At: at, Cause: protocol.Cause{Kind: protocol.CauseProbesSucceeded}},
	}})
}
