package breakertest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// t0 is where the tests' clocks start: the test epoch, which CBDASH_TEST_EPOCH
// moves, not a calendar date.
var t0 = breakertest.Epoch()

func TestClock(t *testing.T) {
	t.Run("fires due timers in order of due time, then of setting, at their due time", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		var got []string
		at := func(name string) func() {
			return func() { got = append(got, name+"@"+c.Now().Sub(t0).String()) }
		}
		c.AfterFunc(30*time.Millisecond, at("c"))
		c.AfterFunc(10*time.Millisecond, at("a"))
		c.AfterFunc(10*time.Millisecond, at("b"))
		c.AfterFunc(time.Second, at("late"))
		c.Advance(50 * time.Millisecond)
		if want := []string{"a@10ms", "b@10ms", "c@30ms"}; !slices.Equal(got, want) {
			t.Errorf("fired %v, want %v", got, want)
		}
		if c.Now() != t0.Add(50*time.Millisecond) || c.Pending() != 1 {
			t.Errorf("now %v, %d pending", c.Now(), c.Pending())
		}
	})
	t.Run("a timer set by a timer fires in the same move if it is due", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		n := 0
		var tick func()
		tick = func() {
			n++
			c.AfterFunc(10*time.Millisecond, tick)
		}
		c.AfterFunc(10*time.Millisecond, tick)
		c.Advance(35 * time.Millisecond)
		if n != 3 {
			t.Errorf("ticked %d times in 35ms, want 3", n)
		}
	})
	t.Run("a stopped timer never fires", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		fired := false
		tm := c.AfterFunc(time.Millisecond, func() { fired = true })
		if !tm.Stop() || tm.Stop() {
			t.Error("Stop should report true once, then false")
		}
		c.Advance(time.Second)
		if fired {
			t.Error("a stopped timer fired")
		}
	})
	t.Run("time never goes back", func(t *testing.T) {
		c := breakertest.NewClock(t0)
		c.Set(t0.Add(-time.Second))
		if !c.Now().Equal(t0) {
			t.Errorf("now %v after setting an earlier time", c.Now())
		}
	})
}
