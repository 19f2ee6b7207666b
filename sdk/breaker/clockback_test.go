package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// steppingClock is a breakertest.Clock whose reading can be set back, as
// a clock written as time.Now().UTC() (no monotonic reading) is when NTP
// steps the wall clock back: Now is the virtual time minus back.
type steppingClock struct {
	*breakertest.Clock
	back atomic.Int64 // nanoseconds
}

func (c *steppingClock) Now() time.Time { return c.Clock.Now().Add(-time.Duration(c.back.Load())) }

// stepBack sets the clock back by d from where it reads now.
func (c *steppingClock) stepBack(d time.Duration) { c.back.Add(int64(d)) }

// catchUp moves the clock forward until it reads what it read before it
// was set back, and on by d.
func (c *steppingClock) catchUp(d time.Duration) {
	c.back.Store(0)
	c.Advance(d)
}

// returns runs fn on its own goroutine and fails the test unless fn
// returns: a breaker left locked makes it block for ever. fn's panic is
// recovered and returned.
func returns(t *testing.T, what string, fn func()) (panicked any) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		fn()
	}()
	select {
	case p := <-done:
		return p
	case <-time.After(10 * time.Second): // a wedged breaker never returns; this only bounds the failure
		t.Fatalf("%s did not return: the breaker is wedged", what)
		return nil
	}
}

var errDown = errors.New("dependency down")

// A Config.Clock that steps back (by seconds, by minutes, to before the
// breaker was made) neither panics nor wedges the breaker: the reading is
// taken as the latest one seen, counted in Snapshot.ClockStepsBack, and
// the breaker goes on recording, tripping and recovering. (That the
// breaker's time also keeps moving after the step is
// TestAnOpenBreakerIsNotHeldOpenByAClockSteppedBack.)
func TestAClockThatStepsBackNeverWedgesTheBreaker(t *testing.T) {
	ctx := context.Background()
	windows := map[string]breaker.Window{
		"count window": {Kind: breaker.CountWindow, Size: 10},
		"time window":  {Kind: breaker.TimeWindow, Duration: 10 * time.Second, Buckets: 10},
	}
	steps := []struct {
		name    string
		elapsed time.Duration // how long the breaker has run when the clock steps back
		back    time.Duration
	}{
		{"by seconds", 30 * time.Second, 3 * time.Second},
		{"by minutes", 30 * time.Minute, 10 * time.Minute},
		{"to a moment before the breaker was made", 0, 1500 * time.Millisecond},
		{"to an hour before the breaker was made", 0, time.Hour + 3500*time.Millisecond},
		{"to before the breaker was made, after it ran", 20 * time.Second, 2*time.Minute + 3500*time.Millisecond},
	}
	for wname, win := range windows {
		for _, step := range steps {
			t.Run(wname+" "+step.name, func(t *testing.T) {
				clk := &steppingClock{Clock: breakertest.NewClock(t0)}
				b := mustNew(t, "payments", breaker.Config{Window: win, MinimumCalls: 4, FailureRateThreshold: 50, OpenDuration: 5 * time.Second, Clock: clk})
				var trs []breaker.Transition
				var mu sync.Mutex
				defer b.Subscribe(func(tr breaker.Transition) { mu.Lock(); trs = append(trs, tr); mu.Unlock() })()
				call := func(err error) {
					t.Helper()
					if p := returns(t, "Execute", func() { _ = b.Execute(ctx, func(context.Context) error { return err }) }); p != nil {
						t.Errorf("Execute panicked: %v", p) // net/http would recover it and go on: so do we
					}
				}
				call(nil)
				clk.Advance(step.elapsed)
				call(nil)
				clk.stepBack(step.back)
				if p := returns(t, "Snapshot", func() { _ = b.Snapshot() }); p != nil {
					t.Fatalf("Snapshot panicked: %v", p)
				}
				for range 4 {
					call(errDown)
				}
				var s breaker.Snapshot
				returns(t, "Snapshot", func() { s = b.Snapshot() })
				if s.State != breaker.Open {
					t.Fatalf("after 4 failures of 6 calls with the clock set back: %v, window %+v; want open", s.State, s.Window)
				}
				if s.ClockStepsBack == 0 {
					t.Errorf("ClockStepsBack = 0 after the clock stepped back %v", step.back)
				}
				if s.At.Before(clk.Clock.Now()) {
					t.Errorf("Snapshot.At %v is before the latest reading %v: the breaker's time went back", s.At, clk.Clock.Now())
				}
				// The clock is set right again (a step forward, taken whole)
				// and runs on: the open duration has run out, and a probe
				// closes the breaker again.
				clk.catchUp(5 * time.Second)
				call(nil)
				returns(t, "Snapshot", func() { s = b.Snapshot() })
				if s.State != breaker.Closed {
					t.Errorf("after the open duration and a good probe: %v, want closed", s.State)
				}
				mu.Lock()
				defer mu.Unlock()
				var got []string
				for _, tr := range trs {
					got = append(got, fmt.Sprint(tr.From, ">", tr.To))
				}
				if want := "[closed>open open>half_open half_open>closed]"; fmt.Sprint(got) != want {
					t.Errorf("transitions %v, want %s", got, want)
				}
			})
		}
	}
}

// The counter counts the steps back that a reading finds, once each, not
// the readings behind the clock's latest: after a step the breaker's time
// goes on from the latest reading at the clock's rate, so the next
// readings are not behind it. A step forward (the clock set right again)
// is taken whole.
func TestClockStepsBackCountsEachStepBack(t *testing.T) {
	start := t0
	clk := &steppingClock{Clock: breakertest.NewClock(start)}
	b := mustNew(t, "payments", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: time.Minute}, Clock: clk})
	for range 3 {
		clk.Advance(time.Second)
		_ = b.Snapshot()
	}
	if n := b.Snapshot().ClockStepsBack; n != 0 {
		t.Fatalf("ClockStepsBack = %d with a clock that only went forward", n)
	}
	clk.stepBack(2 * time.Second)
	at := b.Snapshot().At // finds the step
	_ = b.State()
	s := b.Snapshot()
	if s.ClockStepsBack != 1 {
		t.Errorf("ClockStepsBack = %d after one step back read three times, want 1", s.ClockStepsBack)
	}
	if want := start.Add(3 * time.Second); !at.Equal(want) || !s.At.Equal(want) {
		t.Errorf("readings 2 s behind were taken as %v and %v, want the latest reading %v", at, s.At, want)
	}
	clk.Advance(500 * time.Millisecond)
	if got := b.Snapshot().At; got.Sub(at) != 500*time.Millisecond {
		t.Errorf("the clock ticked 500 ms after the step back, the breaker's time moved %v", got.Sub(at))
	}
	for range 2 {
		clk.stepBack(time.Second)
		_ = b.Snapshot()
	}
	if n := b.Snapshot().ClockStepsBack; n != 3 {
		t.Errorf("ClockStepsBack = %d after three steps back, want 3", n)
	}
	clk.catchUp(0) // the clock is set forward by the 4 s it was set back
	s = b.Snapshot()
	if s.ClockStepsBack != 3 {
		t.Errorf("ClockStepsBack = %d after a step forward, want still 3", s.ClockStepsBack)
	}
	if want := start.Add(7500 * time.Millisecond); !s.At.Equal(want) {
		t.Errorf("after the clock was set forward 4 s at 3.5 s: Snapshot.At = %v, want %v (the step forward taken whole)", s.At, want)
	}
}

// panicHandler is a slog.Handler that panics: a Config.Logger with a bug.
type panicHandler struct{ slog.Handler }

func (panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (panicHandler) Handle(context.Context, slog.Record) error {
	panic("logger bug")
}

// panicClock is a Clock whose AfterFunc panics while armed is set.
type panicClock struct {
	*breakertest.Clock
	armPanics atomic.Bool
}

func (c *panicClock) AfterFunc(d time.Duration, f func()) breaker.Timer {
	if c.armPanics.Load() {
		panic("clock bug")
	}
	return c.Clock.AfterFunc(d, f)
}

// A panic in code the user gave the breaker (Classify, a fallback, an
// observer whose Logger panics too, a Clock's AfterFunc) goes on to the
// caller and leaves nothing locked: every later Execute, Snapshot and
// Apply returns, and later transitions still reach the observers.
func TestAPanicInUserCodeLeavesTheBreakerUnlocked(t *testing.T) {
	ctx := context.Background()
	fail := func(context.Context) error { return errDown }
	ok := func(context.Context) error { return nil }
	followUp := func(t *testing.T, b *breaker.Breaker) {
		t.Helper()
		for i := range 20 {
			if p := returns(t, fmt.Sprint("Execute ", i), func() { _ = b.Execute(ctx, ok) }); p != nil {
				t.Fatalf("a later Execute panicked: %v", p)
			}
		}
		returns(t, "Snapshot", func() { _ = b.Snapshot() })
		returns(t, "Apply", func() { _, _ = b.Apply(breaker.Command{Action: breaker.ActionReset}) })
	}

	t.Run("Classify", func(t *testing.T) {
		b := mustNew(t, "c", breaker.Config{Classify: panickyClassify, MinimumCalls: 100})
		for range 3 {
			if p := returns(t, "Execute", func() { _ = b.Execute(ctx, func(context.Context) error { return errBug }) }); p != "classifier bug" {
				t.Fatalf("recovered %v, want the classifier's panic", p)
			}
		}
		followUp(t, b)
	})

	t.Run("fallback", func(t *testing.T) {
		b := mustNew(t, "f", breaker.Config{MinimumCalls: 1})
		for range 3 {
			p := returns(t, "ExecuteWithFallback", func() {
				_ = b.ExecuteWithFallback(ctx, fail, func(context.Context, error) error { panic("fallback bug") })
			})
			if p != "fallback bug" {
				t.Fatalf("recovered %v, want the fallback's panic", p)
			}
		}
		followUp(t, b)
	})

	t.Run("observer and its Logger", func(t *testing.T) {
		b := mustNew(t, "o", breaker.Config{MinimumCalls: 1, Logger: slog.New(panicHandler{slog.DiscardHandler})})
		var seen atomic.Int64
		defer b.Subscribe(func(tr breaker.Transition) {
			seen.Add(1)
			panic("observer bug")
		})()
		p := returns(t, "Execute", func() { _ = b.Execute(ctx, fail) }) // trips: the observer panics, then the Logger
		if p != "logger bug" {
			t.Fatalf("recovered %v, want the logger's panic out of the call that tripped the breaker", p)
		}
		followUp(t, b) // Apply reset: open > closed, delivered to the observer again
		if n := seen.Load(); n != 2 {
			t.Errorf("the observer was told of %d transitions, want 2 (the trip, then the reset): delivery stopped after the panic", n)
		}
	})

	t.Run("Clock.AfterFunc with a call timeout", func(t *testing.T) {
		clk := &panicClock{Clock: breakertest.NewClock(t0)}
		b := mustNew(t, "t", breaker.Config{CallTimeout: time.Second, MaxConcurrent: 1, Clock: clk})
		clk.armPanics.Store(true)
		if p := returns(t, "Execute", func() { _ = b.Execute(ctx, ok) }); p != "clock bug" {
			t.Fatalf("recovered %v, want the clock's panic", p)
		}
		var err error
		if p := returns(t, "Allow", func() { _, err = b.Allow() }); p != "clock bug" {
			t.Fatalf("recovered %v (Allow returned %v), want the clock's panic", p, err)
		}
		clk.armPanics.Store(false)
		if s := b.Snapshot(); s.InFlight != 0 {
			t.Errorf("InFlight = %d after the calls the clock's panic ended, want 0 (their bulkhead slot freed)", s.InFlight)
		}
		followUp(t, b)
		// The timeout still works: a call that outlives it times out.
		returns(t, "Execute", func() {
			err = b.Execute(ctx, func(ctx context.Context) error {
				clk.Advance(2 * time.Second)
				<-ctx.Done()
				return ctx.Err()
			})
		})
		if !errors.Is(err, breaker.ErrTimeout) {
			t.Errorf("a call past its CallTimeout returned %v, want ErrTimeout", err)
		}
	})
}
