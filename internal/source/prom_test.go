package source_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestResilience4jMetrics scrapes a recorded resilience4j exposition (see
// the comment atop testdata/resilience4j-1.prom for where its names come
// from) twice, 5 s apart.
func TestResilience4jMetrics(t *testing.T) {
	var scrapes [2][]byte
	for i, f := range []string{"testdata/resilience4j-1.prom", "testdata/resilience4j-2.prom"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		scrapes[i] = b
	}
	var which atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer actuator" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(scrapes[which.Load()])
	}))
	t.Cleanup(srv.Close)

	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk, Collector: func(c *collector.Config) { c.StaleAfter = 20 * time.Second }})
	src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, Targets: []source.Target{{
		Kind: source.KindPrometheus, URL: srv.URL + "/actuator/prometheus", Service: "catalog", Instance: "catalog-1",
		Header: map[string]string{"Authorization": "Bearer actuator"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	runSources(t, src)
	eventually.True(t, "the first scrape ingested", func() bool { return src.Status()[0].Batches == 1 })

	dep := func(breaker string) cbdash.Dependency {
		t.Helper()
		d, ok := dependency(t, st, "catalog", breaker)
		if !ok {
			t.Fatalf("catalog/%s is not on the dashboard", breaker)
		}
		return d
	}
	t.Run("the first scrape gives states and rates, and counts nothing it did not see happen", func(t *testing.T) {
		for _, tc := range []struct {
			breaker, state string
			failureRate    float64
		}{{"backendA", "closed", 20}, {"backendB", "half_open", 0}, {"backendC", "closed", 0}} {
			d := dep(tc.breaker)
			if d.State != tc.state || d.Headroom.FailureRate != tc.failureRate || d.Recent != (protocol.Counts{}) {
				t.Errorf("%s: state %q, failure rate %v, counts %+v; want %q, %v, none", tc.breaker, d.State, d.Headroom.FailureRate, d.Recent, tc.state, tc.failureRate)
			}
			c := d.PerInstance[0].Config
			if c.Library != source.LibraryResilience4j || !c.Sampled || !c.HoldsUnsupported {
				t.Errorf("%s: config %+v, want a sampled resilience4j breaker that cannot be held", tc.breaker, c)
			}
		}
	})

	which.Store(1)
	eventually.True(t, "the second scrape ingested", func() bool {
		if src.Status()[0].Batches == 2 {
			return true
		}
		clk.Advance(time.Second)
		return false
	})
	t.Run("the second scrape's increases are the window's counts, and backendA opened", func(t *testing.T) {
		a := dep("backendA")
		want := protocol.Counts{Admitted: 9, Successes: 2, Failures: 6, Errors: 6, Ignored: 1, RejectedOpen: 3}
		if a.State != protocol.StateOpen || a.Recent != want {
			t.Errorf("backendA: state %q, counts %+v; want open, %+v", a.State, a.Recent, want)
		}
		if h := a.Headroom; h.FailureRate != 60 || h.Calls != 10 || h.Failures != 6 {
			t.Errorf("backendA headroom %+v, want failure rate 60%% over 10 buffered calls, 6 failed", h)
		}
		if a.FailureRate != 75 {
			t.Errorf("backendA failure rate over the last minute %v, want 75 (6 of 8 recorded calls)", a.FailureRate)
		}
		// 2 successful calls in 0.1 s and 6 failed in 1.2 s: 1.3 s over 8
		// calls, about 162 ms each, all put at the mean.
		if a.P50 < 100*time.Millisecond || a.P50 > 250*time.Millisecond {
			t.Errorf("backendA p50 %v, want the mean's bucket (100..250 ms)", a.P50)
		}
		trs, err := st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "catalog", Breaker: "backendA", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 1 || trs[0].From != "closed" || trs[0].To != "open" || trs[0].Cause.Kind != protocol.CauseLibraryRule ||
			trs[0].Cause.FailureRate != 60 || trs[0].Cause.WindowCalls != 10 || trs[0].Cause.WindowFailed != 6 {
			t.Errorf("backendA transitions %+v, want closed > open by the library's rule at 60%% (6 of 10)", trs)
		}

		b := dep("backendB")
		want = protocol.Counts{Admitted: 5, Successes: 5, RejectedHalfOpen: 1}
		if b.State != protocol.StateHalfOpen || b.Recent != want {
			t.Errorf("backendB: state %q, counts %+v; want half_open, %+v", b.State, b.Recent, want)
		}
		if h := b.Headroom; h.SlowCallRate != 50 || h.Slow != 2 || h.FailureRate != 0 || h.Calls != 4 {
			t.Errorf("backendB headroom %+v, want slow-call rate 50%% (2 slow of 4 buffered)", h)
		}
	})
}
