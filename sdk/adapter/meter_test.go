package adapter_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestMeterCountsOutcomesRejectionsAndLatencies(t *testing.T) {
	clk := breakertest.NewEpochClock()
	m := adapter.NewMeter("db", clk)
	for _, c := range []struct {
		o breaker.Outcome
		d time.Duration
	}{
		{breaker.Success, 3 * time.Millisecond}, {breaker.Success, 30 * time.Millisecond},
		{breaker.Failure, 30 * time.Millisecond}, {breaker.Timeout, time.Minute},
		{breaker.Panic, 0}, {breaker.Ignored, time.Second}, {breaker.Canceled, 0},
	} {
		start := m.Begin()
		clk.Advance(c.d)
		m.End(start, c.o)
	}
	open := m.Begin()
	m.Reject(adapter.RejectedOpen)
	m.Reject(adapter.RejectedHalfOpenFull)
	m.Reject(adapter.RejectedForcedOpen)
	m.Reject(adapter.RejectedForcedOpen)

	s := m.Snapshot(breaker.HalfOpen)
	want := breaker.Totals{Admitted: 8, Successes: 2, Failures: 3, Errors: 1, Timeouts: 1, Panics: 1, Ignored: 2,
		RejectedOpen: 1, RejectedHalfOpenFull: 1, RejectedForcedOpen: 2}
	if s.Totals != want {
		t.Errorf("totals = %+v\nwant     %+v", s.Totals, want)
	}
	if s.Name != "db" || s.State != breaker.HalfOpen || s.InFlight != 1 || !s.At.Equal(clk.Now()) {
		t.Errorf("snapshot = %+v", s)
	}
	wantLat := make([]uint64, len(breaker.LatencyBounds)+1)
	wantLat[0] = 1  // the panic, 0 ms
	wantLat[2] = 1  // 3 ms <= 5 ms
	wantLat[5] = 2  // 30 ms <= 50 ms
	wantLat[13] = 1 // a minute, past the last bound
	if !slices.Equal(s.Latency, wantLat) {
		t.Errorf("latency = %v, want %v", s.Latency, wantLat)
	}
	if want := 63*time.Millisecond + time.Minute; s.LatencySum != want {
		t.Errorf("latency sum = %v, want %v", s.LatencySum, want)
	}
	m.End(open, breaker.Success)
	if s := m.Snapshot(breaker.Closed); s.InFlight != 0 || s.Totals.Successes != 3 {
		t.Errorf("after the last call ended: %+v", s)
	}
}

func TestMeterDeliversTransitionsInOrderWithGenerations(t *testing.T) {
	clk := breakertest.NewEpochClock()
	m := adapter.NewMeter("db", clk)
	var got []breaker.Transition
	cancel := m.Subscribe(func(t breaker.Transition) { got = append(got, t) })
	m.Subscribe(func(breaker.Transition) { panic("a subscriber that panics does not stop the others") })
	at := clk.Now().Add(-time.Second)
	m.Transition(breaker.Transition{From: breaker.Closed, To: breaker.Open, At: at, Cause: breaker.Cause{Kind: breaker.CauseFailureRate}})
	m.Transition(breaker.Transition{From: breaker.Open, To: breaker.HalfOpen, Cause: breaker.Cause{Kind: breaker.CauseOpenElapsed}})
	cancel()
	m.Transition(breaker.Transition{From: breaker.HalfOpen, To: breaker.Closed})
	if len(got) != 2 {
		t.Fatalf("got %d transitions, want 2 (the third came after cancel)", len(got))
	}
	if g := got[0]; g.Breaker != "db" || g.Generation != 1 || !g.At.Equal(at) || g.To != breaker.Open {
		t.Errorf("first = %+v", g)
	}
	if g := got[1]; g.Generation != 2 || !g.At.Equal(clk.Now()) || g.To != breaker.HalfOpen {
		t.Errorf("second = %+v", g)
	}
	if g := m.Generation(); g != 3 {
		t.Errorf("generation = %d, want 3", g)
	}
}

// Record counts a call its library reports after the fact (hystrix-go's
// metric collectors) with the library's duration, not the Meter's clock;
// bulkhead rejections and fallbacks have their own totals.
func TestMeterRecordsReportedCallsBulkheadRejectionsAndFallbacks(t *testing.T) {
	clk := breakertest.NewEpochClock()
	m := adapter.NewMeter("db", clk)
	m.Record(breaker.Success, 3*time.Millisecond)
	m.Record(breaker.Failure, 30*time.Millisecond)
	m.Record(breaker.Timeout, -time.Second) // counted as 0
	m.Record(breaker.Canceled, time.Hour)   // not timed
	m.Reject(adapter.RejectedBulkhead)
	m.Reject(adapter.RejectedBulkhead)
	m.Fallback(true)
	m.Fallback(false)
	m.Fallback(true)
	s := m.Snapshot(breaker.Closed)
	want := breaker.Totals{Admitted: 4, Successes: 1, Failures: 2, Errors: 1, Timeouts: 1, Ignored: 1,
		RejectedBulkhead: 2, FallbackSuccesses: 2, FallbackFailures: 1}
	if s.Totals != want || s.InFlight != 0 {
		t.Errorf("totals = %+v (in flight %d)\nwant     %+v", s.Totals, s.InFlight, want)
	}
	wantLat := make([]uint64, len(breaker.LatencyBounds)+1)
	wantLat[0], wantLat[2], wantLat[5] = 1, 1, 1
	if !slices.Equal(s.Latency, wantLat) || s.LatencySum != 33*time.Millisecond {
		t.Errorf("latency = %v (sum %v), want %v (33ms)", s.Latency, s.LatencySum, wantLat)
	}
}
