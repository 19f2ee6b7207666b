// Package breakertest provides a virtual clock for testing code that uses
// package breaker, so that timing tests never sleep.
package breakertest

import (
	"slices"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// Clock is a virtual breaker.Clock: its time moves only when Advance or
// Set moves it, and its timers fire then, on the goroutine that moved it.
// It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*timer
}

var _ breaker.Clock = (*Clock)(nil)

type timer struct {
	c   *Clock
	at  time.Time
	seq uint64
	f   func()
	// A ticker's timer (NewTicker) has its interval, reports whether its
	// channel still holds a tick nobody read, and replaces that tick with
	// a later one (see Set).
	period  time.Duration
	full    func() bool
	replace func(time.Time)
}

// NewClock returns a Clock that reads start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d (at once,
// on the next Advance or Set, if d <= 0).
func (c *Clock) AfterFunc(d time.Duration, f func()) breaker.Timer {
	return c.schedule(&timer{f: f}, d)
}

// schedule adds t, due d from now.
func (c *Clock) schedule(t *timer, d time.Duration) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t.c, t.at, t.seq = c, c.now.Add(d), c.seq
	c.timers = append(c.timers, t)
	return t
}

// Stop removes the timer; it reports whether it had not yet fired.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

// Advance moves the clock forward by d (see Set).
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t, firing every timer due at or before t in
// order of due time (then of scheduling); while a timer's function runs,
// the clock reads that timer's due time. Timers scheduled by those
// functions fire too if they are due by t. A t before the clock's time
// only fires what is already due.
//
// A ticker's tick due while its channel still holds one nobody read
// takes that one's place, and so, in the same step, does the last of the
// ticker's ticks due before the next timer that is not a ticker's (or
// t): the channel holds the latest tick, so a receiver that reads after
// the clock moved learns the time it moved to (time.Ticker keeps the
// oldest, but real time goes on and ticks again), and moving the clock a
// day past a 50 ms ticker nobody reads costs a step, not 1.7 million.
func (c *Clock) Set(t time.Time) {
	for {
		c.mu.Lock()
		i := c.nextDueLocked(t)
		if i < 0 {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		tm := c.timers[i]
		if tm.full != nil && tm.full() {
			last := c.lastDueLocked(tm, t)
			tm.replace(last)
			tm.at = last.Add(tm.period)
			c.mu.Unlock()
			continue
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		if tm.at.After(c.now) {
			c.now = tm.at
		}
		c.mu.Unlock()
		tm.f()
	}
}

// lastDueLocked is the last due time of ticker timer tm up to t and up
// to the next timer due that is not a ticker's.
func (c *Clock) lastDueLocked(tm *timer, t time.Time) time.Time {
	horizon := t
	for _, o := range c.timers {
		if o.full == nil && o.at.Before(horizon) {
			horizon = o.at
		}
	}
	return tm.at.Add(horizon.Sub(tm.at) / tm.period * tm.period)
}

func (c *Clock) nextDueLocked(t time.Time) int {
	best := -1
	for i, tm := range c.timers {
		if tm.at.After(t) {
			continue
		}
		if best < 0 || tm.at.Before(c.timers[best].at) || (tm.at.Equal(c.timers[best].at) && tm.seq < c.timers[best].seq) {
			best = i
		}
	}
	return best
}

// Pending returns how many timers are scheduled and not yet fired.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NewTicker delivers the clock's time on the returned channel every d of
// virtual time until stop is called, as time.NewTicker does, but for a
// slow receiver: the channel holds one tick, and a tick that finds it
// full takes the unread one's place (see Set). It makes
// Clock satisfy agent.Clock (and the server's clock), so one virtual clock
// can drive a breaker, an agent and a collector in the same test.
// It panics if d <= 0, like time.NewTicker.
func (c *Clock) NewTicker(d time.Duration) (ticks <-chan time.Time, stop func()) {
	if d <= 0 {
		panic("breakertest: non-positive interval for NewTicker")
	}
	ch := make(chan time.Time, 1)
	var (
		mu      sync.Mutex
		stopped bool
		t       *timer
	)
	full := func() bool { return len(ch) == cap(ch) }
	replace := func(at time.Time) {
		select {
		case <-ch:
		default:
		}
		select {
		case ch <- at:
		default:
		}
	}
	var tick func()
	tick = func() {
		select {
		case ch <- c.Now():
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t = c.schedule(&timer{f: tick, period: d, full: full, replace: replace}, d)
		}
	}
	mu.Lock()
	t = c.schedule(&timer{f: tick, period: d, full: full, replace: replace}, d)
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
