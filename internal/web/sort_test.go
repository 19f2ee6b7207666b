package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// closedWindow is a second of a closed breaker that ends now: calls
// admitted calls of which failed failed, each taking latency bucket
// bucket's time, and a sliding window at failureRate percent of a 50%
// threshold.
func closedWindow(h *harness, breaker string, calls, failed int64, bucket int, failureRate float64) protocol.Batch {
	now := h.clock.Now()
	w := protocol.Window{Breaker: breaker, Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateClosed,
		Headroom: protocol.Headroom{Calls: 100, Failures: int64(failureRate), FailureRate: failureRate, FailureRateThreshold: 50, MinimumCalls: 10},
		Counts:   protocol.Counts{Admitted: calls, Successes: calls - failed, Failures: failed, Errors: failed},
		Latency:  make([]int64, protocol.NumLatencyBuckets)}
	w.Latency[bucket] = calls
	return protocol.Batch{Windows: []protocol.Window{w}}
}

// TestWorstFirstIsOneOrderAndTheOverviewSortsByErrorRateAndLatency: among
// closed breakers "worst first" puts the one nearest its threshold first
// on the overview, in the API and so in the CLI (which prints the API's
// order); the overview also sorts by error rate and by p99 latency.
func TestWorstFirstIsOneOrderAndTheOverviewSortsByErrorRateAndLatency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	// alpha's window is far from its threshold (3% of 50%), but its last
	// minute failed more and was slower; zulu's window is at 45% of 50%.
	h.ingest("alpha", "alpha-1", closedWindow(h, "aardvark", 40, 20, 10, 3))
	h.ingest("zulu", "zulu-1", closedWindow(h, "zebra", 40, 1, 2, 45))
	vera := h.login("vera")

	res := vera.get("/api/v1/dependencies")
	var deps []cbdash.Dependency
	if err := json.Unmarshal([]byte(res.body), &deps); res.status != http.StatusOK || err != nil {
		t.Fatalf("GET /api/v1/dependencies: %d %v", res.status, err)
	}
	var api []string
	for _, d := range deps {
		api = append(api, d.Breaker)
	}
	if strings.Join(api, ",") != "zebra,aardvark" {
		t.Errorf("the API's worst first is %v, want zebra (45%% of 50%%) before aardvark (3%%)", api)
	}
	order := func(query string) string {
		t.Helper()
		body := vera.get("/" + query).body
		a, z := strings.Index(body, `<span class="brk">aardvark</span>`), strings.Index(body, `<span class="brk">zebra</span>`)
		if a < 0 || z < 0 {
			t.Fatalf("GET /%s lacks a tile", query)
		}
		if a < z {
			return "aardvark,zebra"
		}
		return "zebra,aardvark"
	}
	for query, want := range map[string]string{"": "zebra,aardvark", "?sort=worst": "zebra,aardvark", "?sort=name": "aardvark,zebra",
		"?sort=errors": "aardvark,zebra", "?sort=latency": "aardvark,zebra"} {
		if got := order(query); got != want {
			t.Errorf("the overview%s shows %s, want %s", query, got, want)
		}
	}
	page := vera.get("/").body
	for _, want := range []string{`<option value="errors">error rate</option>`, `<option value="latency">latency (p99)</option>`, "admitted (1 min)", "p99 (1 min)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
}
