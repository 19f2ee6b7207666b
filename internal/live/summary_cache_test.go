package live

import (
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestSummaryIsWhatItsLinesSay: this collector's summary of a dependency
// (Summaries), whose shared labels are cached with the dependency's
// shape and whose last windows are summed instance by instance, says
// at every step what its members' lines say (summaryFromLines, the
// summary as a walk of the lines of the instances served here): as
// members report (several windows of one breaker in a batch, periods
// other than a second), trip and are held, as a member's labels change
// at a new hello, a member leaves the dependency, an instance restored
// from the store (not served here) joins and then says hello, and a
// member goes stale and is forgotten.
func TestSummaryIsWhatItsLinesSay(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	db := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	cache := protocol.BreakerConfig{Name: "cache", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	started := map[string]int64{}
	hello := func(inst string, labels map[string]string, breakers ...protocol.BreakerConfig) {
		started[inst]++
		h := testHello("api", inst, db, labels)
		h.StartedAt, h.Breakers = started[inst], breakers
		l.Hello(h, 0, nil, clk.Now(), nil)
	}
	seq := map[string]uint64{}
	report := func(inst string, n int64, ts ...protocol.Transition) {
		seq[inst]++
		state := protocol.StateClosed
		if len(ts) > 0 {
			state = ts[len(ts)-1].To
		}
		c := protocol.Counts{Admitted: 10 * n, Successes: 7 * n, Failures: 3 * n, Errors: 3 * n, RejectedBulkhead: n}
		w1 := window("db", state, clk.Now().Add(-time.Second), c, protocol.Headroom{Calls: 40 + n, Failures: n, MinimumCalls: 10, FailureRate: 7, FailureRateThreshold: 50}, nil)
		w2 := window("db", state, clk.Now(), c, protocol.Headroom{Calls: 50 + n, Failures: 2 * n, MinimumCalls: 10, FailureRate: float64(n), FailureRateThreshold: 50}, nil)
		w2.Millis = 700 + 100*n
		l.Apply(Key{"api", inst}, &protocol.Batch{Seq: seq[inst], Transitions: ts, Windows: []protocol.Window{w1, w2}}, clk.Now())
	}
	check := func(step string, labels map[string]string) {
		t.Helper()
		got, want := l.summaryOf(k), summaryFromLines(l, k)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: summary\n%+v\nwant (from the lines)\n%+v", step, got, want)
		}
		if !reflect.DeepEqual(got.Labels, labels) {
			t.Fatalf("%s: labels %v, want %v", step, got.Labels, labels)
		}
	}
	second := func(insts ...string) {
		clk.Advance(time.Second)
		for i, inst := range insts {
			report(inst, int64(i+1))
		}
	}

	hello("a1", map[string]string{"region": "eu", "zone": "a"}, db, cache)
	hello("a2", map[string]string{"region": "eu", "zone": "b"}, db)
	hello("a3", map[string]string{"region": "eu", "zone": "a", "canary": "yes"}, db)
	second("a1", "a2", "a3")
	check("three members", map[string]string{"region": "eu"})

	trip := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(), Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}}
	hold := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateForcedOpen, At: clk.Now().UnixMilli(), Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: "c1", Action: protocol.ActionForceOpen, Actor: "ops", ExpiresAt: clk.Now().Add(time.Hour).UnixMilli()}}
	report("a2", 2, trip)
	report("a3", 3, hold)
	check("a2 tripped, a3 held", map[string]string{"region": "eu"})

	second("a1", "a2", "a3")
	hello("a2", map[string]string{"region": "eu", "zone": "a"}, db)
	check("a2's new labels", map[string]string{"region": "eu", "zone": "a"})
	hello("a3", map[string]string{"region": "eu"}, db)
	second("a1", "a2", "a3")
	check("a3's new labels", map[string]string{"region": "eu"})
	hello("a3", map[string]string{"region": "eu"}, cache)
	check("a3 left", map[string]string{"region": "eu", "zone": "a"})

	l.Restore([]cbdash.InstanceBreaker{{Service: "api", Instance: "g1", Breaker: "db", State: protocol.StateOpen, LastSeen: clk.Now(),
		Labels: map[string]string{"region": "us"}, Last: &protocol.Window{Breaker: "db", Millis: 1000, Counts: protocol.Counts{Admitted: 5}}}})
	check("g1 restored, not served here", map[string]string{"region": "eu", "zone": "a"})
	if v, _ := l.Dependency(k); v.Labels != nil || v.Instances != 3 {
		t.Fatalf("the view with g1: labels %v, %d instances; want none shared, 3", v.Labels, v.Instances)
	}
	hello("g1", map[string]string{"region": "us", "zone": "a"}, db)
	second("g1")
	check("g1 served here", map[string]string{"zone": "a"})

	for range 20 { // a1 and a2 go stale, g1 reports
		second("g1")
		l.Sweep()
	}
	if got := l.summaryOf(k); got.Stale != 2 || got.Instances != 3 {
		t.Fatalf("after 20 s of g1 alone: %d stale of %d, want 2 of 3", got.Stale, got.Instances)
	}
	check("a1 and a2 stale", map[string]string{"zone": "a"})
	for range 11 * 60 / 10 { // a1 and a2 forgotten after GoneAfter (no session)
		clk.Advance(10 * time.Second)
		report("g1", 1)
		l.Sweep()
	}
	check("a1 and a2 forgotten", map[string]string{"region": "us", "zone": "a"})
}

// summaryOf is this collector's summary of k now (Summaries).
func (l *State) summaryOf(k cbdash.DependencyKey) Summary {
	for _, s := range l.Summaries(true) {
		if s.DependencyKey == k {
			return s
		}
	}
	return Summary{DependencyKey: k}
}

// summaryFromLines is what k's lines (its view's PerInstance) say of
// the instances served here, walked one by one as Summaries did before
// its caches; the figures that are not the members' (Recent, Span,
// Latency, LastChange, Fallback) are summaryOf's.
func summaryFromLines(l *State, k cbdash.DependencyKey) Summary {
	v, _ := l.Dependency(k)
	got := l.summaryOf(k)
	s := Summary{DependencyKey: k, ByState: map[string]int{}, Closeness: -1}
	for _, e := range v.PerInstance {
		l.mu.Lock()
		own := l.instances[Key{e.Service, e.Instance}].own()
		l.mu.Unlock()
		if own {
			s.addLine(e)
		}
	}
	if s.Instances == 0 {
		return Summary{DependencyKey: k}
	}
	s.Recent, s.Span, s.Latency, s.LastChange, s.Fallback = got.Recent, got.Span, got.Latency, got.LastChange, got.Fallback
	return s
}

// addLine counts line e in s.
func (s *Summary) addLine(e *cbdash.InstanceBreaker) {
	s.Labels = sharedLabels(s.Labels, e.Labels, s.Instances == 0)
	s.Instances++
	if e.Stale {
		s.Stale++
		return
	}
	s.ByState[e.State]++
	if cbdash.NotClosed(e.State) && !e.OpenSince.IsZero() && (s.OpenSince.IsZero() || e.OpenSince.Before(s.OpenSince)) {
		s.OpenSince = e.OpenSince
	}
	if c := cbdash.ClosenessOf(e.Last.Headroom).Score; c > s.Closeness {
		s.Closeness, s.Headroom = c, e.Last.Headroom
	}
	if e.Held != nil && (s.Held == nil || outlasts(e.Held, s.Held)) {
		s.Held = e.Held
	}
	if t := e.LastTrip; s.Trip == nil && t != nil && cbdash.Tripped(e.State) && cbdash.RateTrip(t.Cause) {
		c := t.Cause
		s.Trip = &c
	}
	if w := e.Last; w != nil {
		s.Last.Add(w.Counts)
		if w.Millis > 0 {
			s.Rate += float64(w.Counts.Admitted+w.Counts.Rejected()) / (float64(w.Millis) / 1000)
		}
	}
}
