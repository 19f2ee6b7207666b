// Package clock is the server's one source of time. cmd/cbdash creates one
// Clock and passes it to the store, the collector, the web layer, the
// incident and alert services and the demo fleet; none of them calls
// time.Now or starts a ticker of the time package for logical time, so a
// test that sets the clock sets it everywhere. (Network deadlines, which
// the kernel measures, stay on real time.)
//
// Clock has the method set of breaker.Clock and agent.Clock, so the same
// value drives the demo's breakers and agents too. Tests use
// breakertest.Clock (virtual, moved by Advance) or clocktest.Running (real
// speed, started at the test epoch).
package clock

import (
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// Clock tells the time and schedules work on it. Implementations must be
// safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc runs f in its own goroutine (or, for a virtual clock, when
	// the clock is moved past the deadline) once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) breaker.Timer
	// NewTicker delivers the time on ticks every d until stop is called,
	// like time.NewTicker (a slow receiver misses ticks; none queue up).
	NewTicker(d time.Duration) (ticks <-chan time.Time, stop func())
}

// System returns the clock of the operating system.
func System() Clock { return system{} }

type system struct{}

func (system) Now() time.Time { return time.Now() }

func (system) AfterFunc(d time.Duration, f func()) breaker.Timer { return time.AfterFunc(d, f) }

func (system) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// OrSystem returns c, or System() when c is nil: the zero value of a
// config's Clock field.
func OrSystem(c Clock) Clock {
	if c == nil {
		return System()
	}
	return c
}

// Timer is a resettable one-shot timer on a Clock, like time.Timer: C
// receives the clock's time once per arming. Its methods are safe for
// concurrent use.
type Timer struct {
	C   <-chan time.Time
	c   chan time.Time
	clk Clock
	mu  sync.Mutex
	t   breaker.Timer
	gen uint64
}

// NewTimer returns a Timer on clk that fires once after d.
func NewTimer(clk Clock, d time.Duration) *Timer {
	ch := make(chan time.Time, 1)
	t := &Timer{C: ch, c: ch, clk: clk}
	t.Reset(d)
	return t
}

// Reset stops the timer, drains a tick not yet received, and arms it to
// fire after d.
func (t *Timer) Reset(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopLocked()
	t.gen++
	gen := t.gen
	t.t = t.clk.AfterFunc(d, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.gen != gen {
			return
		}
		select {
		case t.c <- t.clk.Now():
		default:
		}
	})
}

// Stop disarms the timer and drains a tick not yet received.
func (t *Timer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopLocked()
	t.gen++
}

func (t *Timer) stopLocked() {
	if t.t != nil {
		t.t.Stop()
	}
	select {
	case <-t.c:
	default:
	}
}

// Sleep waits for d on clk or until done is closed; it reports whether the
// whole d passed.
func Sleep(clk Clock, d time.Duration, done <-chan struct{}) bool {
	t := NewTimer(clk, d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
