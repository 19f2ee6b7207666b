package live

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestReplacedWindowsAreNotKeptUntilTheNextCompute: once a batch's
// windows are all replaced by the instance's next batch, live state
// holds nothing of the old one, also before the dependency's next
// compute. (Lines were rebuilt only by the compute, so until then every
// line built from the old batch kept its whole windows array alive: at
// 1,000 x 20, half a publish interval's batches on average, 4 MB.)
func TestReplacedWindowsAreNotKeptUntilTheNextCompute(t *testing.T) {
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	h := testHello("api", "a", cfg, nil)
	other := cfg
	other.Name = "cache"
	h.Breakers = append(h.Breakers, other)
	l.Hello(h, 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	batch := func(seq uint64) *protocol.Batch {
		clk.Advance(time.Second)
		c := protocol.Counts{Admitted: 10, Successes: 10}
		hr := protocol.Headroom{Calls: 10, MinimumCalls: 10, FailureRateThreshold: 50}
		return &protocol.Batch{Seq: seq, Windows: []protocol.Window{
			window("db", protocol.StateClosed, clk.Now(), c, hr, nil),
			window("cache", protocol.StateClosed, clk.Now(), c, hr, nil),
		}}
	}
	first := batch(1)
	if !l.Apply(Key{"api", "a"}, first, clk.Now()) {
		t.Fatal("first batch not applied")
	}
	if _, ok := l.Dependency(k); !ok { // a compute: the lines point into first
		t.Fatal("dependency unknown")
	}
	old := weak.Make(&first.Windows[0])
	first = nil
	second := batch(2)
	if !l.Apply(Key{"api", "a"}, second, clk.Now()) {
		t.Fatal("second batch not applied")
	}
	kept := weak.Make(&second.Windows[0])
	second = nil
	runtime.GC()
	runtime.GC()
	if old.Value() != nil {
		t.Error("the first batch's windows are still reachable after the second replaced them all: a line built from it keeps them until the next compute")
	}
	if kept.Value() == nil {
		t.Fatal("the second batch's windows were freed: live state must point at them, and the check above proves nothing")
	}
	d, _ := l.Dependency(k)
	if d.PerInstance[0].Last != kept.Value() {
		t.Fatal("the line does not show the second batch's window")
	}
	runtime.KeepAlive(l)
}

// TestLinesShowTheLastOfSeveralBatchesBetweenComputes: an instance
// sending several batches between two computes (a replayed backlog) has
// its line rebuilt as the first is applied and not on the others; the
// compute shows the last one, in the interval where that starts and in
// the next (where its line waits for the compute from the first batch).
func TestLinesShowTheLastOfSeveralBatchesBetweenComputes(t *testing.T) {
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	seq := uint64(0)
	apply := func(state string, calls int64) {
		t.Helper()
		seq++
		clk.Advance(100 * time.Millisecond)
		b := &protocol.Batch{Seq: seq, Windows: []protocol.Window{window("db", state, clk.Now(), protocol.Counts{Admitted: calls, Successes: calls},
			protocol.Headroom{Calls: calls, MinimumCalls: 10, FailureRateThreshold: 50}, nil)}}
		if !l.Apply(Key{"api", "a"}, b, clk.Now()) {
			t.Fatalf("batch %d not applied", seq)
		}
	}
	for interval, states := range [][]string{
		{protocol.StateClosed},
		{protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen},
		{protocol.StateClosed, protocol.StateOpen},
		{protocol.StateHalfOpen},
		{protocol.StateClosed},
	} {
		for i, st := range states {
			apply(st, int64(10*interval+i+1))
		}
		d, _ := l.Dependency(k)
		ln := d.PerInstance[0]
		want := states[len(states)-1]
		if ln.State != want || ln.Last.State != want || ln.Last.Headroom.Calls != int64(10*interval+len(states)) || d.State != want {
			t.Fatalf("interval %d: line %s, window %s of %d calls, dependency %s; want %s, %d calls", interval, ln.State, ln.Last.State, ln.Last.Headroom.Calls, d.State, want, 10*interval+len(states))
		}
	}
}

// TestALinesShowsTheLastWindowOfItsBatch: a batch carrying two windows
// of one breaker (an agent's report of a quiet stretch, closed, then of
// the tick where the breaker opened) leaves the breaker's line, and so
// the dependency, as the second says. The line was built from the first
// as it was applied, and the compute kept it: the dependency showed
// closed until the instance's next batch (seen as a flaky end-to-end
// test under load, where the agent's quiet tick fell before the trip).
func TestALinesShowsTheLastWindowOfItsBatch(t *testing.T) {
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	for seq, states := range [][]string{
		{protocol.StateClosed},
		{protocol.StateClosed, protocol.StateOpen},
		{protocol.StateOpen, protocol.StateHalfOpen, protocol.StateClosed},
	} {
		b := &protocol.Batch{Seq: uint64(seq + 1)}
		for i, st := range states {
			clk.Advance(50 * time.Millisecond)
			calls := int64(10*seq + i + 1)
			b.Windows = append(b.Windows, window("db", st, clk.Now(), protocol.Counts{Admitted: calls, Failures: calls},
				protocol.Headroom{Calls: calls, MinimumCalls: 10, FailureRateThreshold: 50}, nil))
		}
		if !l.Apply(Key{"api", "a"}, b, clk.Now()) {
			t.Fatalf("batch %d not applied", seq+1)
		}
		d, _ := l.Dependency(k)
		ln := d.PerInstance[0]
		want := states[len(states)-1]
		if d.State != want || ln.State != want || ln.Last != &b.Windows[len(b.Windows)-1] {
			t.Fatalf("batch %d: dependency %s, line %s with window %s of %d calls; want %s, the batch's last window",
				seq+1, d.State, ln.State, ln.Last.State, ln.Last.Headroom.Calls, want)
		}
	}
}

// TestEqualBreakerListsAreShared: instances declaring the same breakers,
// configured alike, share one list (their lines' configurations are
// then one value), one configured otherwise keeps its own, and a list
// no hello holds any more is not kept by live state.
func TestEqualBreakerListsAreShared(t *testing.T) {
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	drifted := cfg
	drifted.FailureRateThreshold = 20
	hellos := map[string]*protocol.Hello{
		"a": testHello("api", "a", cfg, nil), "b": testHello("api", "b", cfg, nil), "c": testHello("api", "c", drifted, nil),
	}
	ownB := weak.Make(&hellos["b"].Breakers[0])
	for _, name := range []string{"a", "b", "c"} {
		l.Hello(hellos[name], 0, nil, clk.Now(), nil)
	}
	a, b, c := hellos["a"].Breakers, hellos["b"].Breakers, hellos["c"].Breakers
	if &a[0] != &b[0] {
		t.Error("two hellos with equal breaker lists do not share one")
	}
	if &c[0] == &a[0] || c[0] != drifted {
		t.Errorf("a hello with another configuration shares the list of the others, or lost its own: %+v", c[0])
	}
	d, _ := l.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if d.PerInstance[0].Config != &a[0] || d.PerInstance[1].Config != &a[0] || *d.PerInstance[2].Config != drifted {
		t.Error("lines do not point at the shared configurations")
	}
	runtime.GC()
	runtime.GC()
	if ownB.Value() != nil {
		t.Error("b's own list is kept although b's hello shares a's")
	}
	// a and b declare another breaker: the first list is held by no hello.
	first := weak.Make(&a[0])
	a, b, d = nil, nil, cbdash.Dependency{}
	for _, name := range []string{"a", "b"} {
		h := testHello("api", name, cfg, nil)
		h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: "cache"})
		l.Hello(h, 0, nil, clk.Now(), nil)
		hellos[name] = h
	}
	if &hellos["a"].Breakers[0] != &hellos["b"].Breakers[0] {
		t.Error("the new equal lists are not shared")
	}
	l.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"}) // lines anew
	runtime.GC()
	runtime.GC()
	if first.Value() != nil {
		t.Error("a list no hello holds any more is kept")
	}
	runtime.KeepAlive(hellos)
	runtime.KeepAlive(l)
}
