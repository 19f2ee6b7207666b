package breaker

import "time"

// Clock is the breaker's time source. Now should be monotonic (never go
// backwards). AfterFunc runs f in its own goroutine (or, for a fake clock,
// when the clock is moved past the deadline) once d has passed, unless the
// returned Timer is stopped first. The breaker uses AfterFunc only for
// CallTimeout. A Clock must be safe for concurrent use; its Now may be
// called under the breaker's CallTimeout lock (a panic releases it).
//
// A Clock whose Now is not monotonic (time.Now().UTC() drops the
// monotonic reading, and the wall clock steps with NTP or by hand) never
// breaks a breaker. The breaker keeps its own time, in the manner of the
// monotonic reading of Go's time package (time.Now keeps one so that
// durations ignore steps of the wall clock): the breaker's time is Now's
// reading plus an offset that starts at 0 and only grows.
//
//   - A step back: a reading that would put the breaker's time before the
//     latest time it has seen (including a reading before the breaker was
//     made) grows the offset by the size of the step, so that this reading
//     is the latest time seen; from there the breaker's time moves on at
//     the clock's own rate. Open durations, half-open probes, forced
//     states' expiries, call timeouts and time-window buckets run on
//     normally, neither held back until the clock catches up nor replayed.
//     Each step is counted in Snapshot.ClockStepsBack.
//   - A step forward is taken whole: the clock cannot tell it from time
//     passing. A breaker whose clock jumps an hour ahead has seen an hour
//     go by: an open breaker is half-open (and lets a probe through), a
//     time window's buckets have expired, a forced state with an expiry has
//     run out. When the clock is then set right (a step back), none of this
//     is undone, and the breaker's time stays an hour ahead of the clock.
//
// So the breaker's time (Snapshot.At, Transition.At, Call.Started, a forced
// state's end) is ahead of Now by the sum of the steps back seen, exactly
// as the system clock's is: with a nil Config.Clock the breaker measures
// time.Since its creation, which reads only the monotonic clock, and
// reports its creation's wall time plus that.
//
// A reading more than about 73 years (2^61 ns) before or after the
// breaker's creation (the zero time.Time, a clock gone wild) is not
// believed: it is taken as the latest time seen, moves nothing, and is
// counted in Snapshot.ClockStepsBack. The breaker's time stops at 73 years.
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
