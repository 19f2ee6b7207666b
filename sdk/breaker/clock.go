package breaker

import "time"

// Clock is the breaker's time source. Now should be monotonic (never go
// backwards). One that is not (time.Now().UTC() drops the monotonic
// reading, and the wall clock steps back with NTP) never breaks a
// breaker: a reading earlier than the latest one seen, or earlier than
// the breaker's creation, is taken as the latest one seen (the breaker's
// time stands still until the clock catches up) and counted in
// Snapshot.ClockStepsBack. AfterFunc runs f in its own goroutine (or, for a fake clock,
// when the clock is moved past the deadline) once d has passed, unless the
// returned Timer is stopped first. The breaker uses AfterFunc only for
// CallTimeout. A Clock must be safe for concurrent use.
//
// Tests use breakertest.Clock, a virtual clock; production code leaves
// Config.Clock nil, which uses the system's monotonic clock.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled AfterFunc; *time.Timer satisfies it.
type Timer interface {
	// Stop prevents the function from running; it reports whether it did
	// (false: it has already run or been stopped).
	Stop() bool
}

// systemClock is the Clock used when Config.Clock is nil. The breaker
// does not call its Now on the hot path: it measures offsets from its
// creation with time.Since, which reads only the monotonic clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// SystemClock returns the Clock that a Config with a nil Clock uses: the
// system's monotonic clock and time.AfterFunc.
func SystemClock() Clock { return systemClock{} }
