package live

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestASummaryCountsAsTheLinesItStandsFor: collector "one" holds a1, b1
// and b2 line by line; collector A holds a1 and B's summary of b1 and
// b2. A's view of the dependency says what one's says (instances, by
// state, state, counts, rates, percentiles, headroom, episode), with a
// line of a1 only; b1's trip moves it to open in A's view at once (its
// transition is published to A's subscribers) before B's next summary.
func TestASummaryCountsAsTheLinesItStandsFor(t *testing.T) {
	t.Parallel()
	one, clk := newTestLive(t)
	a := newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
	b := newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	hist := make([]int64, protocol.NumLatencyBuckets)
	hist[2] = 7
	on := map[string][]*State{"a1": {one, a}, "b1": {one, b}, "b2": {one, b}}
	for inst, ls := range on {
		for _, l := range ls {
			l.Hello(testHello("api", inst, cfg, map[string]string{"region": "eu"}), 0, nil, clk.Now(), nil)
		}
	}
	apply := func(inst string, seq uint64, c protocol.Counts, h protocol.Headroom, ts ...protocol.Transition) {
		state := protocol.StateClosed
		if len(ts) > 0 {
			state = ts[len(ts)-1].To
		}
		for _, l := range on[inst] {
			l.Apply(Key{"api", inst}, &protocol.Batch{Seq: seq, Transitions: ts, Windows: []protocol.Window{
				window("db", state, clk.Now(), c, h, hist)}}, clk.Now())
		}
	}
	for s := uint64(1); s <= 5; s++ {
		clk.Advance(time.Second)
		apply("a1", s, protocol.Counts{Admitted: 10, Successes: 10}, protocol.Headroom{Calls: 50, MinimumCalls: 10, FailureRateThreshold: 50})
		apply("b1", s, protocol.Counts{Admitted: 20, Successes: 15, Failures: 5}, protocol.Headroom{Calls: 60, Failures: 15, MinimumCalls: 10, FailureRate: 25, FailureRateThreshold: 50})
		apply("b2", s, protocol.Counts{Admitted: 30, Successes: 30, RejectedBulkhead: 2}, protocol.Headroom{Calls: 40, MinimumCalls: 10, FailureRateThreshold: 50})
	}
	sync := func() {
		for _, s := range b.Summaries(false) {
			a.ApplySummary("B", s)
		}
	}
	sync()
	same := func(what string) {
		t.Helper()
		want, _ := one.Dependency(k)
		got, _ := a.Dependency(k)
		if got.Instances != want.Instances || got.Stale != want.Stale || got.State != want.State || !maps.Equal(got.ByState, want.ByState) ||
			got.Recent != want.Recent || !near(got.RequestRate, want.RequestRate) || got.FailureRate != want.FailureRate ||
			!near(got.RejectedRate, want.RejectedRate) || got.P99 != want.P99 || got.Headroom != want.Headroom || !got.OpenSince.Equal(want.OpenSince) ||
			got.OpensToday != want.OpensToday || !maps.Equal(got.Labels, want.Labels) || got.Shown != want.Shown {
			t.Fatalf("%s: A's view\n%s\nwant one collector's\n%s", what, brief(got), brief(want))
		}
		if len(got.PerInstance) != 1 || got.PerInstance[0].Instance != "a1" {
			t.Fatalf("%s: A's lines: %d, want a1's only", what, len(got.PerInstance))
		}
	}
	same("from the summary")
	if a.InstancesHeld() != 1 || b.InstancesHeld() != 2 {
		t.Fatalf("A holds %d instances, B %d; want 1 and 2", a.InstancesHeld(), b.InstancesHeld())
	}

	_, events, cancel := a.Subscribe(map[string]bool{cbdash.EventTransition: true}, 0)
	defer cancel()
	clk.Advance(time.Second)
	trip := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(), Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}}
	for _, l := range []*State{one, b} {
		l.Apply(Key{"api", "b1"}, &protocol.Batch{Seq: 6, Transitions: []protocol.Transition{trip}}, clk.Now())
	}
	a.RemoteTransitions("B", Key{"api", "b1"}, []protocol.Transition{trip}, clk.Now())
	if e := <-events; e.Transition == nil || e.Transition.Instance != "b1" || e.Transition.To != protocol.StateOpen {
		t.Fatalf("A published %+v, want b1's trip", e)
	}
	if got, _ := a.Dependency(k); got.ByState[protocol.StateOpen] != 1 || got.State != protocol.StateOpen || got.OpensToday != 1 {
		t.Fatalf("A's view after b1's trip, before B's summary: by state %v, state %q, opens today %d", got.ByState, got.State, got.OpensToday)
	}
	if got, _ := a.Dependency(k); got.Shown.Failure.Label != "failure rate, tripped at" || got.Shown.Failure.Value != 60 {
		t.Fatalf("A's shown failure rate after b1's trip: %+v, want b1's at its trip", got.Shown.Failure)
	}
	sync()
	same("after B's next summary")
}

// TestSummariesComeAndGo: a collector's summary stops counting
// RemoteExpiry after it was last renewed, and an empty one removes it
// at once; lines restored from the store that no one heard from since
// are forgotten when another collector's summary arrives; after a gap
// the store's states stand for the summaries for StoreHold.
func TestSummariesComeAndGo(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	a.Restore([]cbdash.InstanceBreaker{{Service: "api", Instance: "gone", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now()}})
	if a.InstancesHeld() != 1 {
		t.Fatalf("restored: %d instances held, want 1", a.InstancesHeld())
	}
	s := Summary{DependencyKey: k, Instances: 2, ByState: map[string]int{protocol.StateClosed: 1, protocol.StateOpen: 1}, Span: 1}
	a.ApplySummary("B", s)
	if d, _ := a.Dependency(k); d.Instances != 2 || d.State != protocol.StateOpen || a.InstancesHeld() != 0 {
		t.Fatalf("with B's summary: %d instances, state %q, %d held; want 2, open, 0 (the restored line forgotten)", d.Instances, d.State, a.InstancesHeld())
	}
	a.ApplySummary("C", Summary{DependencyKey: k, Instances: 1, ByState: map[string]int{protocol.StateClosed: 1}, Span: 1})
	a.ApplySummary("C", Summary{DependencyKey: k})
	if d, _ := a.Dependency(k); d.Instances != 2 {
		t.Fatalf("after C's empty summary: %d instances, want 2", d.Instances)
	}

	a.ResyncSummaries([]cbdash.InstanceBreaker{
		{Service: "api", Instance: "b1", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now()},
		{Service: "api", Instance: "b2", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now()},
		{Service: "api", Instance: "b3", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now()},
	})
	if d, _ := a.Dependency(k); d.Instances != 3 || d.State != protocol.StateClosed {
		t.Fatalf("after a gap: %d instances, state %q; want the store's 3, closed", d.Instances, d.State)
	}
	clk.Advance(StoreHold + time.Second)
	a.ApplySummary("B", s)
	a.Sweep()
	if d, _ := a.Dependency(k); d.Instances != 2 || d.State != protocol.StateOpen {
		t.Fatalf("after StoreHold: %d instances, state %q; want B's 2, open", d.Instances, d.State)
	}
	clk.Advance(RemoteExpiry + time.Second)
	a.Sweep()
	if _, ok := a.Dependency(k); ok {
		t.Fatal("the dependency is still known RemoteExpiry after B's last summary")
	}
}

func brief(d cbdash.Dependency) string {
	return fmt.Sprintf("instances %d stale %d state %q by state %v recent %+v rates %v/%v/%v p99 %v headroom %+v open since %v opens %d labels %v",
		d.Instances, d.Stale, d.State, d.ByState, d.Recent, d.RequestRate, d.FailureRate, d.RejectedRate, d.P99, d.Headroom, d.OpenSince, d.OpensToday, d.Labels)
}

// near: rates summed per collector may differ from one sum in the last bit.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestAnInstanceThatMovedHereShowsItsStoredStateUntilItReports: an
// instance that says hello here after another collector served it shows
// the state the store has of it (open) until its first report, which
// then counts; a stored state read after that report changes nothing.
func TestAnInstanceThatMovedHereShowsItsStoredStateUntilItReports(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	l.Hello(testHello("api", "b1", cfg, nil), 0, nil, clk.Now(), nil)
	stored := []cbdash.InstanceBreaker{{Service: "api", Instance: "b1", Breaker: "db", State: protocol.StateOpen, LastTransition: clk.Now().Add(-time.Minute)}}
	l.Seed(stored)
	if d, _ := l.Dependency(k); d.State != protocol.StateOpen || !d.OpenSince.Equal(clk.Now().Add(-time.Minute)) {
		t.Fatalf("after the seed: state %q, open since %v; want open a minute ago", d.State, d.OpenSince)
	}
	clk.Advance(time.Second)
	l.Apply(Key{"api", "b1"}, &protocol.Batch{Seq: 1, Windows: []protocol.Window{
		window("db", protocol.StateClosed, clk.Now(), protocol.Counts{Admitted: 1, Successes: 1}, protocol.Headroom{}, nil)}}, clk.Now())
	l.Seed(stored)
	if d, _ := l.Dependency(k); d.State != protocol.StateClosed {
		t.Fatalf("after its report and a late seed: state %q, want closed (its report)", d.State)
	}
}

// A collector publishes its transitions and its summaries in one order
// (Config.Applied, PublishSummaries): a summary built while a batch with
// a trip waits to be applied neither counts the trip nor follows it out;
// the summary after the trip counts it. (The trip used to be published
// when its batch was read: a summary built before its apply followed it
// onto the bus, and the other collectors, having moved the instance to
// open, moved it back to closed until the next summary.)
func TestATransitionAndTheSummariesGoOutInTheOrderTheyCountIt(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	k := Key{"api", "a1"}
	l.Hello(testHello("api", "a1", cfg, nil), 0, nil, clk.Now(), nil)
	l.Apply(k, &protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", protocol.StateClosed, clk.Now(),
		protocol.Counts{Admitted: 10, Successes: 10}, protocol.Headroom{}, nil)}}, clk.Now())
	var out []string
	l.applied = func(_ Key, ts []protocol.Transition, _ time.Time) {
		for _, tr := range ts {
			out = append(out, "transition to "+tr.To)
		}
	}
	publish := func() {
		l.PublishSummaries(true, func(ss []Summary) {
			for _, s := range ss {
				out = append(out, fmt.Sprintf("summary: %d open", s.ByState[protocol.StateOpen]))
			}
		})
	}
	clk.Advance(time.Second)
	trip := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli()}
	b := &protocol.Batch{Seq: 2, Transitions: []protocol.Transition{trip}, Windows: []protocol.Window{window("db", protocol.StateOpen, clk.Now(),
		protocol.Counts{Admitted: 10, Failures: 10}, protocol.Headroom{}, nil)}}
	if !l.Enqueue(context.Background(), Update{Key: k, Batch: b, At: clk.Now()}) {
		t.Fatal("the batch was not queued")
	}
	publish() // the trip is queued, not applied
	stop := make(chan struct{})
	close(stop)
	l.ApplyLoop(stop) // applies what is queued, then returns
	publish()
	if want := []string{"summary: 0 open", "transition to open", "summary: 1 open"}; !slices.Equal(out, want) {
		t.Fatalf("published %q, want %q", out, want)
	}
}

// A collector that dies takes its instances with it, not the calls they
// made: its last part's minute of calls fades out of the dependency's
// one-minute rates at the pace a minute slides (1 - age/span), while its
// instances reconnect here and count from their first report; the
// instances themselves stop counting at once. A part that comes back
// counts whole again, and a collector whose last member of the
// dependency left (an empty summary) fades the same way.
func TestTheCallsOfACollectorThatDiedFadeOutOfTheRates(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "a1", cfg, nil), 0, nil, clk.Now(), nil) // keeps the dependency known here
	b := Summary{DependencyKey: k, Instances: 2, ByState: map[string]int{protocol.StateClosed: 2}, Span: 60,
		Recent: protocol.Counts{Admitted: 1200, Successes: 1140, Failures: 60}}
	a.ApplySummary("B", b)
	rate := func(step string, instances int, want float64) {
		t.Helper()
		a.Sweep()
		d, ok := a.Dependency(k)
		if !ok || d.Instances != instances || math.Abs(d.RequestRate-want) > 0.2 {
			t.Fatalf("%s: %s; want %d instances, %.1f calls/s", step, brief(d), instances, want)
		}
		if want > 0 && math.Abs(d.FailureRate-5) > 0.1 {
			t.Fatalf("%s: failure rate %.2f %%, want B's 5 %%", step, d.FailureRate)
		}
	}
	rate("B's part", 3, 20)
	clk.Advance(3 * time.Second)
	a.KeepSources(nil, 2*time.Second) // B left the bus
	rate("B gone, 3 s after its last summary", 1, 20*57.0/60)
	clk.Advance(27 * time.Second)
	rate("30 s after", 1, 10)
	clk.Advance(30 * time.Second)
	rate("60 s after", 1, 0)

	a.ApplySummary("B", b) // B is back
	rate("B back", 3, 20)
	clk.Advance(6 * time.Second)
	a.ApplySummary("B", Summary{DependencyKey: k}) // B's last member of api/db left
	rate("B's members left", 1, 18)
}

// The one-minute rates of a dependency are every count, here and in the
// other collectors' parts, over the longest span of them, as one
// collector's are its counts over its ring's span: a part whose span is
// short (its collector has had the dependency's calls for 5 s, since an
// instance moved to it) is not extrapolated to a rate of its own and
// added to this collector's minute, which holds the same instance's
// calls before the move (after a failback both collectors read 241/s
// for 197/s for a minute).
func TestAShortPartIsNotExtrapolatedIntoTheRates(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "a1", cfg, nil), 0, nil, clk.Now(), nil)
	for i := range 60 {
		clk.Advance(time.Second)
		a.Apply(Key{"api", "a1"}, &protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{window("db", protocol.StateClosed, clk.Now(),
			protocol.Counts{Admitted: 20, Successes: 20}, protocol.Headroom{}, nil)}}, clk.Now())
	}
	a.ApplySummary("B", Summary{DependencyKey: k, Instances: 1, ByState: map[string]int{protocol.StateClosed: 1}, Span: 5,
		Recent: protocol.Counts{Admitted: 50, Successes: 50}})
	a.Sweep()
	d, _ := a.Dependency(k)
	if want := (1200.0 + 50) / 60; !near(d.RequestRate, want) || d.Recent.Admitted != 1250 {
		t.Fatalf("%s; want %.2f calls/s (1,250 calls over the minute), not 20 + 10", brief(d), want)
	}
}

// A part whose counts span less than a minute (its collector had the
// dependency's calls for 20 s) keeps them whole until they start to
// leave the minute (40 s after), then fades them out by 60 s: they were
// made in the 20 s before it was sent, not spread over a minute.
func TestAYoungPartFadesAsItsSecondsLeaveTheMinute(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "a1", cfg, nil), 0, nil, clk.Now(), nil)
	a.ApplySummary("B", Summary{DependencyKey: k, Instances: 2, ByState: map[string]int{protocol.StateClosed: 2}, Span: 20,
		Recent: protocol.Counts{Admitted: 400, Successes: 400}})
	a.KeepSources(nil, 0) // B left the bus
	for _, c := range []struct {
		after time.Duration
		calls int64
	}{{10 * time.Second, 400}, {40 * time.Second, 400}, {50 * time.Second, 200}, {60 * time.Second, 0}} {
		clk.Set(clocktest.Noon().Add(c.after))
		a.Sweep()
		if d, _ := a.Dependency(k); d.Recent.Admitted != c.calls {
			t.Fatalf("%v after B's last summary: %d calls in the minute, want %d", c.after, d.Recent.Admitted, c.calls)
		}
	}
}
