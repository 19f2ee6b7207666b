package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingestClosed reports one closed breaker of service over POST
// /api/v1/ingest: calls admitted in its last second, failed of them
// failing, each in latency bucket bucket, and a sliding window at
// windowRate percent of a 50 % threshold.
func ingestClosed(t *testing.T, st *stacktest.Stack, service, breaker string, calls, failed int64, bucket int, windowRate float64) {
	t.Helper()
	now := st.Clock.Now()
	w := protocol.Window{Breaker: breaker, Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateClosed,
		Counts:   protocol.Counts{Admitted: calls, Successes: calls - failed, Failures: failed, Errors: failed},
		Headroom: protocol.Headroom{Calls: 100, FailureRate: windowRate, FailureRateThreshold: 50, MinimumCalls: 10},
		Latency:  make([]int64, protocol.NumLatencyBuckets)}
	w.Latency[bucket] = calls
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: service, Instance: service + "-1",
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: breaker, WindowKind: "count", WindowSize: 100,
				FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Windows: []protocol.Window{w}},
	}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, st.URL()+"/api/v1/ingest", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+st.AgentToken)
	hr.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("ingest %s/%s: %d", service, breaker, res.StatusCode)
	}
}

// inOrderOf lists names in the order they first appear in text.
func inOrderOf(text string, names ...string) string {
	at := map[string]int{}
	for _, n := range names {
		at[n] = strings.Index(text, n)
	}
	sort.SliceStable(names, func(i, j int) bool { return at[names[i]] < at[names[j]] })
	return strings.Join(names, ",")
}

// TestStatusTheAPIAndTheOverviewSortAlike: one moment of three closed
// breakers read four ways: `cbdash status --sort X`, GET
// /api/v1/dependencies?sort=X, GET /api/v1/breakers?sort=X and the
// overview's own sort give one order for each of worst first, error
// rate, p99, request rate and name; without --sort and ?sort= it is
// worst first, as before; an unknown order is refused.
func TestStatusTheAPIAndTheOverviewSortAlike(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk, Web: func(c *web.Config) { c.Anonymous = true }})
	// payments: nearest its threshold, few failures, fast, 40 calls;
	// search: far from it, half its calls failed, the slowest, 20 calls;
	// db: between on each, the busiest (100 calls).
	ingestClosed(t, st, "checkout", "payments", 40, 1, 2, 45)
	ingestClosed(t, st, "catalog", "search", 20, 10, 12, 3)
	ingestClosed(t, st, "orders", "db", 100, 5, 7, 10)
	eventually.True(t, "three dependencies", func() bool { return len(st.Collector.Dependencies()) == 3 })

	names := []string{"checkout/payments", "catalog/search", "orders/db"}
	for _, tt := range []struct{ order, page, want string }{
		{"", "", "checkout/payments,orders/db,catalog/search"},
		{cbdash.OrderWorst, "worst", "checkout/payments,orders/db,catalog/search"},
		{cbdash.OrderErrorRate, "errors", "catalog/search,orders/db,checkout/payments"},
		{cbdash.OrderP99, "latency", "catalog/search,orders/db,checkout/payments"},
		{cbdash.OrderRequestRate, "rate", "orders/db,checkout/payments,catalog/search"},
		{cbdash.OrderName, "name", "catalog/search,checkout/payments,orders/db"},
	} {
		t.Run("sort="+tt.order, func(t *testing.T) {
			args, q := []string{"status"}, ""
			if tt.order != "" {
				args, q = append(args, "--sort", tt.order), "?sort="+tt.order
			}
			code, out, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": st.URL()}, args...)
			if code != 0 {
				t.Fatalf("%v: %d %s", args, code, stderr)
			}
			if got := inOrderOf(out, names...); got != tt.want {
				t.Errorf("%v prints %s, want %s:\n%s", args, got, tt.want, out)
			}
			for _, path := range []string{"/api/v1/dependencies", "/api/v1/breakers"} {
				var deps []cbdash.Dependency
				if err := json.Unmarshal(httpGet(t, st.URL()+path+q), &deps); err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, d := range deps {
					got = append(got, d.DependencyKey.String())
				}
				if strings.Join(got, ",") != tt.want {
					t.Errorf("GET %s%s answers %v, want %s", path, q, got, tt.want)
				}
			}
			page := "/"
			if tt.page != "" {
				page += "?sort=" + tt.page
			}
			body := string(httpGet(t, st.URL()+page))
			tiles := inOrderOf(body, `<span class="brk">payments</span>`, `<span class="brk">search</span>`, `<span class="brk">db</span>`)
			tiles = strings.NewReplacer(`<span class="brk">payments</span>`, "checkout/payments", `<span class="brk">search</span>`, "catalog/search",
				`<span class="brk">db</span>`, "orders/db").Replace(tiles)
			if tiles != tt.want {
				t.Errorf("the overview %s shows %s, want %s", page, tiles, tt.want)
			}
		})
	}
	res, err := http.Get(st.URL() + "/api/v1/dependencies?sort=fastest")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("?sort=fastest: %d, want 400", res.StatusCode)
	}
	if code, _, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": st.URL()}, "status", "--sort", "fastest"); code != 2 || !strings.Contains(stderr, "error_rate") {
		t.Errorf("status --sort fastest: exit %d, %q; want 2 naming the orders", code, stderr)
	}
}
