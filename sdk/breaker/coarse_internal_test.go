package breaker

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// heat runs successful calls through b until the coarse clock runs (b is
// hot), at most 10 million of them.
func heat(t *testing.T, b *Breaker) {
	t.Helper()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	for i := 0; coarse.now.Load() == 0; i++ {
		if i > 10_000_000 {
			t.Fatal("the coarse clock never started")
		}
		if err := b.Execute(ctx, ok); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCoarseStopped polls until the coarse clock's ticker has stopped: it
// must, coarseLease after the last hot check.
func waitCoarseStopped(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for coarse.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock's ticker did not stop")
		}
		runtime.Gosched()
	}
}

// A hot breaker's successful closed calls read the coarse clock and still
// count every call once in the histogram, allocate nothing, and the
// ticker stops by itself once the calls stop.
func TestCoarseClockOnAHotBreaker(t *testing.T) {
	b, err := New("hot", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.coarseOK {
		t.Fatal("a default breaker may not use the coarse clock")
	}
	heat(t, b)
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(10000, func() { _ = b.Execute(ctx, ok) }); n != 0 {
		t.Errorf("hot Execute: %v allocs per call", n)
	}
	s := b.Snapshot()
	var hist uint64
	for _, n := range s.Latency {
		hist += n
	}
	if hist != s.Totals.Successes || s.Totals.Admitted != s.Totals.Successes {
		t.Errorf("histogram holds %d calls, totals %+v: every ended call is counted once", hist, s.Totals)
	}
	// A call that returns at once is counted in the first bucket (<= 1ms)
	// unless a late tick of the coarse clock (or a preemption, with the
	// precise clock too) fell within it: rare, even on a busy machine.
	if s.Latency[0] < hist-hist/100 {
		t.Errorf("more than 1%% of the calls that return at once counted beyond the first bucket (<= 1ms): %v", s.Latency)
	}
	waitCoarseStopped(t)
	if coarse.now.Load() != 0 {
		t.Error("a stopped coarse clock must read 0 (not ticking), so that calls read the precise clock")
	}
}

// A failure on a hot breaker reads the precise clock at its end: a trip's
// time is exact, not a tick late or early.
func TestCoarseClockNotForFailures(t *testing.T) {
	b, err := New("hot-trip", Config{MinimumCalls: 1, Window: Window{Size: 1}})
	if err != nil {
		t.Fatal(err)
	}
	heat(t, b)
	var at time.Time
	b.Subscribe(func(tr Transition) { at = tr.At })
	before := time.Now()
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	after := time.Now()
	if b.State() != Open {
		t.Fatal("not open")
	}
	// The breaker's wall time is its base plus monotonic time since, so it
	// may differ from time.Now by the wall clock's steps only (none here).
	if at.Before(before.Add(-time.Millisecond/10)) || at.After(after.Add(time.Millisecond/10)) {
		t.Errorf("trip at %v, want within the call [%v, %v]", at, before, after)
	}
	waitCoarseStopped(t)
}

// Only a breaker whose decisions never depend on a call's duration reads
// the coarse clock.
func TestCoarseClockOnlyWhereNoDecisionNeedsTime(t *testing.T) {
	for name, c := range map[string]Config{
		"slow-call detection": {SlowCallDuration: time.Second},
		"call timeout":        {CallTimeout: time.Second},
		"bulkhead":            {MaxConcurrent: 3},
		"time window":         {Window: Window{Kind: TimeWindow, Duration: time.Second}},
		"injected clock":      {Clock: SystemClock()},
	} {
		b, err := New("b", c)
		if err != nil {
			t.Fatal(err)
		}
		if b.coarseOK {
			t.Errorf("%s: may use the coarse clock", name)
		}
	}
}

// In a testing/synctest bubble (fake time from 2000) a breaker never reads
// the coarse clock, and a hot one does not start it: its ticker would run
// on the bubble's time and belong to the bubble.
func TestCoarseClockNotInABubble(t *testing.T) {
	waitCoarseStopped(t)
	before := coarse.starts.Load()
	synctest.Test(t, func(t *testing.T) {
		b, err := New("bubble", Config{})
		if err != nil {
			t.Fatal(err)
		}
		if b.coarseOK {
			t.Error("a breaker made in a bubble may use the coarse clock")
		}
		ok := func(context.Context) error { return nil }
		for range 3 * hotCalls {
			_ = b.Execute(context.Background(), ok)
		}
		b.checkHot(0, 1)
		b.checkHot(0, 2)
	})
	if n := coarse.starts.Load(); n != before {
		t.Errorf("the coarse clock started %d times from a bubble", n-before)
	}
}
