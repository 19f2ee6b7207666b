package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// exec runs one call that returns err through b and returns Execute's
// error (a rejection, or err if the call ran).
func exec(b *breaker.Breaker, err error) error {
	return b.Execute(context.Background(), func(context.Context) error { return err })
}

// recorder collects a breaker's transitions as "from>to".
type recorder struct {
	mu  sync.Mutex
	trs []string
}

func (r *recorder) add(tr breaker.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trs = append(r.trs, fmt.Sprint(tr.From, ">", tr.To))
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.trs)
}

var bothWindows = map[string]breaker.Window{
	"count window": {Kind: breaker.CountWindow, Size: 10},
	"time window":  {Kind: breaker.TimeWindow, Duration: 10 * time.Second, Buckets: 10},
}

// The reviewer's repro (issue 27 item 12, F5): a clock an hour ahead is
// corrected back. Clamping held the open breaker open for the whole hour,
// rejecting every call; now the breaker's time carries on from the
// latest reading at the clock's rate, so the open duration (50 ms) runs
// out 50 ms after the failed probe, as it would without the step.
func TestAnOpenBreakerIsNotHeldOpenByAClockSteppedBack(t *testing.T) {
	for wname, win := range bothWindows {
		t.Run(wname, func(t *testing.T) {
			clk := &steppingClock{Clock: breakertest.NewEpochClock()}
			b := mustNew(t, "payments", breaker.Config{Window: win, MinimumCalls: 2, FailureRateThreshold: 50, OpenDuration: 50 * time.Millisecond, Clock: clk})
			var rec recorder
			defer b.Subscribe(rec.add)()
			for range 2 {
				_ = exec(b, errDown)
			}
			if s := b.State(); s != breaker.Open {
				t.Fatalf("after 2 failures: %v, want open", s)
			}
			// The clock jumps an hour ahead: the open duration has run out
			// by then (documented), the call is a probe, it fails.
			clk.Advance(time.Hour)
			if err := exec(b, errDown); !errors.Is(err, errDown) {
				t.Fatalf("the call an hour later returned %v, want the probe's own error", err)
			}
			if s := b.State(); s != breaker.Open {
				t.Fatalf("after the failed probe: %v, want open", s)
			}
			// NTP sets it back by the hour.
			clk.stepBack(time.Hour)
			if err := exec(b, nil); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("right after the step back: %v, want ErrOpen (the open duration has not run out)", err)
			}
			clk.Advance(200 * time.Millisecond)
			if s := b.State(); s != breaker.HalfOpen {
				t.Fatalf("200 ms after the step back, with OpenDuration 50 ms: %v, want half_open", s)
			}
			if err := exec(b, nil); err != nil {
				t.Fatalf("the probe 200 ms after the step back: %v, want it to run and succeed", err)
			}
			s := b.Snapshot()
			if s.State != breaker.Closed {
				t.Errorf("after a good probe: %v, want closed", s.State)
			}
			if s.ClockStepsBack != 1 {
				t.Errorf("ClockStepsBack = %d after one step back, want 1", s.ClockStepsBack)
			}
			// The breaker's time went on from the latest reading (epoch+1h)
			// at the clock's rate: it is an hour ahead of the clock, like
			// Go's monotonic time after the wall clock is set back.
			if want := breakertest.Epoch().Add(time.Hour + 200*time.Millisecond); !s.At.Equal(want) {
				t.Errorf("Snapshot.At = %v, want %v (the latest reading plus the 200 ms since)", s.At, want)
			}
			if want := "[closed>open open>half_open half_open>open open>half_open half_open>closed]"; rec.String() != want {
				t.Errorf("transitions %v, want %s", rec.String(), want)
			}
		})
	}
}

// A step back of minutes in the middle of a time window: the calls after
// it go on filling the buckets of the breaker's time, and the buckets
// from before it leave the window when the window's duration has passed
// on the clock, not when the clock has caught up.
func TestATimeWindowKeepsSlidingAcrossAStepBack(t *testing.T) {
	clk := &steppingClock{Clock: breakertest.NewEpochClock()}
	// 10 buckets of 1 s; MinimumCalls high, so that it only counts.
	b := mustNew(t, "payments", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: 10 * time.Second, Buckets: 10}, MinimumCalls: 100, Clock: clk})
	window := func(when string, calls, failures int64) {
		t.Helper()
		w := b.Snapshot().Window
		if w.Calls != calls || w.Failures != failures {
			t.Errorf("%s: window has %d calls, %d failures; want %d, %d", when, w.Calls, w.Failures, calls, failures)
		}
	}
	clk.Advance(500 * time.Millisecond) // breaker time 0.5 s: bucket 0
	_, _ = exec(b, errDown), exec(b, errDown)
	clk.Advance(time.Second) // 1.5 s: bucket 1
	for range 3 {
		_ = exec(b, nil)
	}
	clk.stepBack(5 * time.Minute) // still 1.5 s: bucket 1
	_ = exec(b, errDown)
	window("right after the step back", 6, 3)
	clk.Advance(3 * time.Second) // 4.5 s: bucket 4
	_, _ = exec(b, nil), exec(b, nil)
	window("3 s after the step back", 8, 3)
	clk.Advance(6 * time.Second) // 10.5 s: buckets 1-10, bucket 0 has left
	window("at 10.5 s", 6, 1)
	clk.Advance(2 * time.Second) // 12.5 s: buckets 3-12
	window("at 12.5 s", 2, 0)
	clk.Advance(5 * time.Second) // 17.5 s: buckets 8-17
	window("at 17.5 s", 0, 0)
	if n := b.Snapshot().ClockStepsBack; n != 1 {
		t.Errorf("ClockStepsBack = %d after one step back, want 1", n)
	}
}

// A clock corrected by many small steps back (an NTP client stepping a
// fast clock back by 1 ms every 10 ms) does not slow the breaker down:
// its time moves on by every forward movement of the clock, so the open
// duration runs out after 1 s of the clock's own ticking.
func TestSmallRepeatedStepsBackDoNotStallTheBreaker(t *testing.T) {
	for wname, win := range bothWindows {
		t.Run(wname, func(t *testing.T) {
			clk := &steppingClock{Clock: breakertest.NewEpochClock()}
			b := mustNew(t, "payments", breaker.Config{Window: win, MinimumCalls: 2, FailureRateThreshold: 50, OpenDuration: time.Second, Clock: clk})
			_, _ = exec(b, errDown), exec(b, errDown)
			openedAt := b.Snapshot().At
			prev := openedAt
			for i := range 100 {
				clk.Advance(10 * time.Millisecond)
				at := b.Snapshot().At
				if d := at.Sub(prev); d != 10*time.Millisecond {
					t.Fatalf("cycle %d: the clock ticked 10 ms, the breaker's time moved %v", i, d)
				}
				clk.stepBack(time.Millisecond)
				if s := b.Snapshot(); !s.At.Equal(at) {
					t.Fatalf("cycle %d: a 1 ms step back moved the breaker's time from %v to %v", i, at, s.At)
				}
				if i < 99 {
					if err := exec(b, nil); !errors.Is(err, breaker.ErrOpen) {
						t.Fatalf("cycle %d, %v after the trip: %v, want ErrOpen", i, prev.Sub(openedAt), err)
					}
				}
				prev = at
			}
			// The clock reads 0.9 s after the trip; it ticked 1 s.
			s := b.Snapshot()
			if s.State != breaker.HalfOpen {
				t.Errorf("after the clock ticked 1 s in 10 ms steps, each followed by a 1 ms step back: %v, want half_open", s.State)
			}
			if got := s.At.Sub(openedAt); got != time.Second {
				t.Errorf("the breaker's time moved %v, want 1s", got)
			}
			if s.ClockStepsBack != 100 {
				t.Errorf("ClockStepsBack = %d, want 100", s.ClockStepsBack)
			}
		})
	}
}

// Readers racing a clock that steps back each see the breaker's time
// never go back, and the steps are all counted.
func TestConcurrentReadersSeeMonotonicTimeAcrossStepsBack(t *testing.T) {
	clk := &steppingClock{Clock: breakertest.NewEpochClock()}
	b := mustNew(t, "payments", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: time.Second, Buckets: 10}, MinimumCalls: 1000, Clock: clk})
	const readers, steps = 4, 200
	stop := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev time.Time
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				_ = exec(b, nil)
				at := b.Snapshot().At
				if at.Before(prev) {
					errs <- fmt.Errorf("reading %d: the breaker's time went back from %v to %v", i, prev, at)
					return
				}
				prev = at
			}
		}()
	}
	for range steps {
		clk.Advance(3 * time.Millisecond)
		_ = b.Snapshot() // a reading ahead, so that the step back is one
		clk.stepBack(time.Millisecond)
		_ = b.Snapshot() // a step back no reading sees is not one
	}
	_ = b.Snapshot()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// A step is counted once by the reading that finds it; a reading that
	// races the one absorbing it may count it again.
	if n := b.Snapshot().ClockStepsBack; n < steps {
		t.Errorf("ClockStepsBack = %d after %d steps back, want at least %d", n, steps, steps)
	}
	// The time moved on by every forward tick, not less.
	if got, want := b.Snapshot().At, breakertest.Epoch().Add(steps*3*time.Millisecond); got.Before(want) {
		t.Errorf("Snapshot.At = %v, want at least %v", got, want)
	}
}

// setClock is a breakertest.Clock whose reading is set by the test to any
// instant, the zero time and far future included.
type setClock struct {
	*breakertest.Clock
	mu sync.Mutex
	at time.Time
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *setClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}

// A clock that reads absurd instants (the zero time, year 9999, back and
// forth) neither panics nor sends the breaker's time back, and the breaker
// goes on recording, tripping and recovering after it.
func TestAClockReadingAbsurdInstantsKeepsTheBreakerWorking(t *testing.T) {
	for wname, win := range bothWindows {
		t.Run(wname, func(t *testing.T) {
			start := breakertest.Epoch()
			clk := &setClock{Clock: breakertest.NewEpochClock(), at: start}
			b := mustNew(t, "payments", breaker.Config{Window: win, MinimumCalls: 2, FailureRateThreshold: 50, OpenDuration: time.Second, Clock: clk})
			var prev time.Time
			for i, at := range []time.Time{
				start.Add(time.Second), {}, start, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
				{}, time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), start.Add(-time.Hour), time.Unix(1<<62, 0), start,
			} {
				clk.set(at)
				if p := returns(t, "Execute", func() { _ = exec(b, nil) }); p != nil {
					t.Fatalf("reading %d (%v): Execute panicked: %v", i, at, p)
				}
				var s breaker.Snapshot
				if p := returns(t, "Snapshot", func() { s = b.Snapshot() }); p != nil {
					t.Fatalf("reading %d (%v): Snapshot panicked: %v", i, at, p)
				}
				if s.At.Before(prev) {
					t.Fatalf("reading %d (%v): the breaker's time went back from %v to %v", i, at, prev, s.At)
				}
				prev = s.At
			}
			// The clock is sane again: the breaker trips on failures, and
			// one open duration later a probe closes it.
			s := b.Snapshot()
			// Ignored, each of the 3 readings (Execute reads twice, Snapshot
			// once) of the zero time twice, year 1, year 9999 and 2^62 s
			// after 1970: 15; steps back: start after start+1s, an hour
			// before start: 2.
			if s.ClockStepsBack != 17 {
				t.Errorf("ClockStepsBack = %d, want 17", s.ClockStepsBack)
			}
			// The breaker's time went on by the believed forward moves:
			// 1 s, then the hour from start-1h to start.
			if want := start.Add(time.Hour + time.Second); !s.At.Equal(want) {
				t.Errorf("Snapshot.At = %v, want %v", s.At, want)
			}
			for range 10 {
				_ = exec(b, errDown)
			}
			if s := b.State(); s != breaker.Open {
				t.Fatalf("after 10 failures: %v, want open", s)
			}
			clk.set(start.Add(1100 * time.Millisecond))
			if err := exec(b, nil); err != nil {
				t.Fatalf("the probe an open duration later: %v", err)
			}
			if s := b.State(); s != breaker.Closed {
				t.Errorf("after a good probe: %v, want closed", s)
			}
		})
	}
}

// A call timeout runs on across a step back: a call that outlives its
// CallTimeout on the clock's ticking times out, although the clock was
// set back an hour while it ran.
func TestACallTimeoutRunsOnAcrossAStepBack(t *testing.T) {
	clk := &steppingClock{Clock: breakertest.NewEpochClock()}
	b := mustNew(t, "payments", breaker.Config{CallTimeout: time.Second, Clock: clk})
	var err error
	returns(t, "Execute", func() {
		err = b.Execute(context.Background(), func(ctx context.Context) error {
			clk.stepBack(time.Hour)
			_ = b.State() // a reading finds the step
			clk.Advance(2 * time.Second)
			<-ctx.Done()
			return ctx.Err()
		})
	})
	if !errors.Is(err, breaker.ErrTimeout) {
		t.Fatalf("a call that ran 2 s of the clock with CallTimeout 1 s returned %v, want ErrTimeout", err)
	}
	if s := b.Snapshot(); s.Totals.Timeouts != 1 || s.ClockStepsBack != 1 {
		t.Errorf("Totals.Timeouts = %d, ClockStepsBack = %d; want 1, 1", s.Totals.Timeouts, s.ClockStepsBack)
	}
}
