// Package clocktest provides the clocks server tests run on: a virtual
// clock at the test epoch (moved only by the test) and a clock that runs
// at real speed from the test epoch (for tests with real browsers, real
// sockets and real agents). Both start at breakertest.Epoch(), which the
// CBDASH_TEST_EPOCH environment variable moves, so the whole suite can be
// run at a date years ahead or in the past.
package clocktest

import (
	"sync"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// Epoch is the instant test clocks start at (see breakertest.Epoch).
func Epoch() time.Time { return breakertest.Epoch() }

// Virtual returns a virtual clock at Epoch(); only Advance and Set move it,
// firing its timers and tickers on the goroutine that moves it.
func Virtual() *breakertest.Clock { return breakertest.NewEpochClock() }

var _ clock.Clock = (*breakertest.Clock)(nil)

// Running is a clock that reads Epoch() when made and then advances with
// the system's monotonic clock; its timers and tickers are real ones.
type Running struct {
	base  time.Time
	start time.Time
}

var _ clock.Clock = (*Running)(nil)

// NewRunning returns a Running clock started at Epoch().
func NewRunning() *Running { return &Running{base: Epoch(), start: time.Now()} }

// Now returns Epoch() plus the real time elapsed since NewRunning.
func (r *Running) Now() time.Time { return r.base.Add(time.Since(r.start)) }

// AfterFunc is time.AfterFunc.
func (r *Running) AfterFunc(d time.Duration, f func()) breaker.Timer { return time.AfterFunc(d, f) }

// NewTicker is time.NewTicker, delivering this clock's time.
func (r *Running) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	out := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-t.C:
				select {
				case out <- r.Now():
				default:
				}
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			t.Stop()
			close(done)
		})
	}
}

// Noon is noon UTC of Epoch()'s day: a fixture time aligned to the
// minute, the hour and the day (12 hours from either midnight), for tests
// whose fixtures need aligned times or print times of day.
func Noon() time.Time { return Epoch().Truncate(24 * time.Hour).Add(12 * time.Hour) }
