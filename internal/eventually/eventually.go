// Package eventually waits, in tests, for an effect that happens on
// another goroutine or across a socket: it polls a condition until it
// holds or a real-time deadline passes. It is the one polling helper of
// the project's tests; prefer a channel or event when the code under test
// offers one, and a virtual clock (clocktest.Virtual) for waits that are
// logical time.
package eventually

import (
	"testing"
	"time"
)

// Timeout is how long True waits before it fails the test: long enough
// for a loaded CI machine, short enough to fail well before go test's own
// timeout.
const Timeout = 10 * time.Second

// True polls cond until it returns true, first every millisecond, then
// less often (at most every 20 ms; see Wait). If cond has not held within Timeout,
// it fails tb with "timed out after 10s waiting for <what>". It must be
// called from the test's goroutine (it may call tb.Fatalf).
func True(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Timeout, what, cond)
}

// Within is True with the deadline d instead of Timeout.
func Within(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Wait(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Wait polls cond as True does and reports whether it held within d; it
// fails nothing, for a caller that reports the failure itself or may be
// on another goroutine than the test's. Waits longer than Timeout (the
// end-to-end tests of real time) poll at most every d/120, so that a
// minute's wait does not query a server fifty times a second.
func Wait(d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	pause, most := time.Millisecond, 20*time.Millisecond
	if d > Timeout {
		most = d / 120
	}
	for {
		t := time.NewTimer(pause)
		select {
		case <-deadline.C:
			t.Stop()
			return cond()
		case <-t.C:
		}
		if cond() {
			return true
		}
		pause = min(2*pause, most)
	}
}
