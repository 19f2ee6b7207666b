package clock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fired reports whether t has a tick waiting, and which.
func fired(t *clock.Timer) (time.Time, bool) {
	select {
	case at := <-t.C:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestTimer(t *testing.T) {
	t.Run("fires once, at its due time on the clock", func(t *testing.T) {
		clk := clocktest.Virtual()
		start := clk.Now()
		tm := clock.NewTimer(clk, time.Second)
		clk.Advance(999 * time.Millisecond)
		if _, ok := fired(tm); ok {
			t.Fatal("fired before its due time")
		}
		clk.Advance(time.Millisecond)
		at, ok := fired(tm)
		if !ok || !at.Equal(start.Add(time.Second)) {
			t.Fatalf("fired %v at %v, want at %v", ok, at, start.Add(time.Second))
		}
		clk.Advance(time.Hour)
		if _, ok := fired(tm); ok {
			t.Fatal("a one-shot timer fired twice")
		}
	})
	t.Run("reset re-arms from now and drops a tick not received", func(t *testing.T) {
		clk := clocktest.Virtual()
		tm := clock.NewTimer(clk, time.Second)
		clk.Advance(time.Second) // fired, not received
		tm.Reset(time.Minute)
		if _, ok := fired(tm); ok {
			t.Fatal("Reset kept the tick of the earlier arming")
		}
		clk.Advance(59 * time.Second)
		if _, ok := fired(tm); ok {
			t.Fatal("fired before a minute after Reset")
		}
		clk.Advance(time.Second)
		if _, ok := fired(tm); !ok {
			t.Fatal("did not fire a minute after Reset")
		}
	})
	t.Run("reset before the due time replaces the earlier deadline", func(t *testing.T) {
		clk := clocktest.Virtual()
		tm := clock.NewTimer(clk, time.Second)
		tm.Reset(time.Hour)
		clk.Advance(time.Minute)
		if _, ok := fired(tm); ok {
			t.Fatal("the replaced deadline fired")
		}
		if n := clk.Pending(); n != 1 {
			t.Errorf("%d timers pending on the clock, want 1", n)
		}
	})
	t.Run("a stopped timer never fires and leaves nothing on the clock", func(t *testing.T) {
		clk := clocktest.Virtual()
		tm := clock.NewTimer(clk, time.Second)
		tm.Stop()
		clk.Advance(time.Hour)
		if _, ok := fired(tm); ok {
			t.Fatal("a stopped timer fired")
		}
		if n := clk.Pending(); n != 0 {
			t.Errorf("%d timers pending after Stop, want 0", n)
		}
	})
	t.Run("runs on the system clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // the system clock is the bubble's
			start := time.Now()
			tm := clock.NewTimer(clock.System(), time.Second)
			defer tm.Stop()
			bubbletest.Advance(time.Second - time.Nanosecond)
			if _, ok := fired(tm); ok {
				t.Fatal("fired before its due time")
			}
			bubbletest.Advance(time.Nanosecond)
			synctest.Wait()
			if at, ok := fired(tm); !ok || !at.Equal(start.Add(time.Second)) {
				t.Fatalf("fired %v at %v, want at %v", ok, at, start.Add(time.Second))
			}
		})
	})
}

// TestSleep runs in synctest bubbles: synctest.Wait returns once the
// sleeping goroutine has armed its timer and waits on it.
func TestSleep(t *testing.T) {
	t.Run("returns true once the whole wait has passed on the clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clk := clocktest.Virtual()
			done := make(chan bool, 1)
			go func() { done <- clock.Sleep(clk, time.Minute, nil) }()
			synctest.Wait()
			clk.Advance(59 * time.Second)
			synctest.Wait()
			select {
			case <-done:
				t.Fatal("Sleep returned before its minute")
			default:
			}
			clk.Advance(time.Second)
			if ok := <-done; !ok {
				t.Fatal("Sleep reported false after the whole wait")
			}
		})
	})
	t.Run("returns false when done is closed first, and cleans up its timer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clk := clocktest.Virtual()
			stop := make(chan struct{})
			done := make(chan bool, 1)
			go func() { done <- clock.Sleep(clk, time.Minute, stop) }()
			synctest.Wait()
			if n := clk.Pending(); n != 1 {
				t.Fatalf("%d timers on the clock while Sleep waits, want 1", n)
			}
			close(stop)
			if ok := <-done; ok {
				t.Fatal("Sleep reported true after done was closed")
			}
			if n := clk.Pending(); n != 0 {
				t.Errorf("%d timers left on the clock, want 0", n)
			}
		})
	})
	t.Run("waits on the system clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // the system clock is the bubble's
			start := time.Now()
			if ok := clock.Sleep(clock.System(), time.Minute, nil); !ok || time.Since(start) != time.Minute {
				t.Fatalf("Sleep on the system clock reported %v after %v, want true after exactly a minute", ok, time.Since(start))
			}
		})
	})
}

func TestOrSystem(t *testing.T) {
	if _, ok := clock.OrSystem(nil).(interface{ Pending() int }); ok {
		t.Error("OrSystem(nil) is not the system clock")
	}
	clk := clocktest.Virtual()
	if clock.OrSystem(clk) != clock.Clock(clk) {
		t.Error("OrSystem(c) is not c")
	}
	if d := time.Since(clock.System().Now()); d < 0 || d > time.Minute {
		t.Errorf("the system clock is %v away from time.Now", d)
	}
}
