package breakertest_test

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// tick returns the tick waiting on ch, if any.
func tick(ch <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-ch:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestClockNewTicker(t *testing.T) {
	t.Run("ticks every d of virtual time with the clock's time", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		ticks, stop := c.NewTicker(time.Second)
		defer stop()
		for i := 1; i <= 3; i++ {
			c.Advance(999 * time.Millisecond)
			if at, ok := tick(ticks); ok {
				t.Fatalf("tick %d early, at %v", i, at)
			}
			c.Advance(time.Millisecond)
			at, ok := tick(ticks)
			if want := t0.Add(time.Duration(i) * time.Second); !ok || !at.Equal(want) {
				t.Fatalf("tick %d: %v at %v, want at %v", i, ok, at, want)
			}
		}
	})
	t.Run("holds one tick, the latest, for a slow receiver", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		ticks, stop := c.NewTicker(time.Second)
		defer stop()
		c.Advance(10 * time.Second)
		at, ok := tick(ticks)
		if !ok || !at.Equal(t0.Add(10*time.Second)) {
			t.Fatalf("held tick %v at %v, want the one at 10s (the receiver learns the time the clock moved to)", ok, at)
		}
		if at, ok := tick(ticks); ok {
			t.Fatalf("a second tick queued (at %v), want it dropped", at)
		}
		c.Advance(time.Second)
		if _, ok := tick(ticks); !ok {
			t.Fatal("no tick after the receiver caught up")
		}
	})
	t.Run("a day past an unread ticker is one step, and timers still fire at their time", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		ticks, stop := c.NewTicker(50 * time.Millisecond)
		defer stop()
		var firedAt []time.Time
		for _, d := range []time.Duration{time.Hour, 5 * time.Hour} {
			c.AfterFunc(d, func() { firedAt = append(firedAt, c.Now()) })
		}
		// Before: 1.7 million ticks, each a new timer (seconds under the
		// race detector); now a handful of steps.
		// AllocsPerRun runs it twice (the first to warm up): a day.
		if allocs := testing.AllocsPerRun(1, func() { c.Advance(12 * time.Hour) }); allocs > 50 {
			t.Errorf("moving a day past a 50 ms ticker took %v allocations, want a handful", allocs)
		}
		if len(firedAt) != 2 || !firedAt[0].Equal(t0.Add(time.Hour)) || !firedAt[1].Equal(t0.Add(5*time.Hour)) {
			t.Fatalf("timers fired at %v, want at 1h and 5h", firedAt)
		}
		if at, ok := tick(ticks); !ok || !at.Equal(t0.Add(24*time.Hour)) {
			t.Fatalf("held tick %v at %v, want the latest, at 24h", ok, at)
		}
		c.Advance(50 * time.Millisecond)
		if at, ok := tick(ticks); !ok || !at.Equal(t0.Add(24*time.Hour+50*time.Millisecond)) {
			t.Fatalf("tick after the receiver caught up: %v at %v, want one at 24h50ms", ok, at)
		}
	})
	t.Run("stop ends the ticks and leaves no timer", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		ticks, stop := c.NewTicker(time.Second)
		stop()
		stop() // idempotent
		c.Advance(time.Minute)
		if _, ok := tick(ticks); ok {
			t.Fatal("ticked after stop")
		}
		if n := c.Pending(); n != 0 {
			t.Fatalf("%d timers pending after stop, want 0", n)
		}
	})
	t.Run("a non-positive interval panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("NewTicker(0) did not panic")
			}
		}()
		breakertest.NewClock(t0).NewTicker(0)
	})
}

func TestEpoch(t *testing.T) {
	t.Run("is DefaultEpoch when the variable is empty", func(t *testing.T) {
		t.Setenv(breakertest.EpochEnv, "")
		if got := breakertest.Epoch(); !got.Equal(breakertest.DefaultEpoch) {
			t.Fatalf("Epoch() = %v, want %v", got, breakertest.DefaultEpoch)
		}
	})
	t.Run("is moved by the variable, in UTC", func(t *testing.T) {
		// A moment away from the default, written in another zone: Epoch
		// reads it and gives it in UTC.
		want := breakertest.DefaultEpoch.Add(5000*24*time.Hour + 15*time.Hour).UTC()
		t.Setenv(breakertest.EpochEnv, want.In(time.FixedZone("", 2*60*60)).Format(time.RFC3339))
		if got := breakertest.Epoch(); !got.Equal(want) || got.Location() != time.UTC {
			t.Fatalf("Epoch() = %v, want %v", got, want)
		}
		if got := breakertest.NewEpochClock().Now(); !got.Equal(want) {
			t.Fatalf("NewEpochClock() reads %v, want %v", got, want)
		}
	})
	t.Run("panics on a value that is not RFC 3339", func(t *testing.T) {
		t.Setenv(breakertest.EpochEnv, "next tuesday")
		defer func() {
			if recover() == nil {
				t.Fatal("Epoch() accepted a bad value")
			}
		}()
		breakertest.Epoch()
	})
}
