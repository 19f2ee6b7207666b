package breaker

import (
	"context"
	"errors"
)

// ErrRejected is matched (errors.Is) by every rejection: ErrOpen,
// ErrHalfOpenFull, ErrForcedOpen, ErrBulkheadFull and ErrRamp.
var ErrRejected = errors.New("breaker: call rejected")

// rejection is the type of the rejection sentinels: each is itself and also
// ErrRejected under errors.Is.
type rejection struct{ msg string }

func (e *rejection) Error() string { return e.msg }

func (e *rejection) Is(target error) bool { return target == ErrRejected }

// Rejections. A rejected call never runs and is never recorded as a
// failure; it is counted in the matching Totals.Rejected* counter.
var (
	// ErrOpen rejects a call while the breaker is open.
	ErrOpen error = &rejection{"breaker: open"}
	// ErrHalfOpenFull rejects a call while half-open when
	// HalfOpenMaxCalls probes are already in flight.
	ErrHalfOpenFull error = &rejection{"breaker: half-open and every probe slot taken"}
	// ErrForcedOpen rejects a call while an operator holds the breaker open.
	ErrForcedOpen error = &rejection{"breaker: forced open"}
	// ErrBulkheadFull rejects a call when MaxConcurrent calls are in flight.
	ErrBulkheadFull error = &rejection{"breaker: bulkhead full"}
	// ErrRamp rejects a call that the ramp after a recovery does not admit
	// yet (see Config.RampDuration): the breaker is closed, but admits
	// only a rising share of the calls.
	ErrRamp error = &rejection{"breaker: ramping up after recovery"}
)

// ErrTimeout is the error of a call that ran into the breaker's own
// CallTimeout; it is also the cause (context.Cause) of the call's context.
// It is a failure (Outcome Timeout).
var ErrTimeout = errors.New("breaker: call timed out")

// ErrInvalidCommand is wrapped by the errors Apply returns for a bad
// Command.
var ErrInvalidCommand = errors.New("breaker: invalid command")

// ignorable marks an error as no fault of the dependency.
type ignorable struct{ err error }

func (e ignorable) Error() string { return e.err.Error() }
func (e ignorable) Unwrap() error { return e.err }

// Ignorable marks err as no fault of the dependency (a 404, a validation
// error, a declined card): DefaultClassify returns Ignored for it, so it
// is neither a success nor a failure in the sliding window. The result
// still matches err under errors.Is and errors.As. Ignorable(nil) is nil.
func Ignorable(err error) error {
	if err == nil {
		return nil
	}
	return ignorable{err}
}

// IsIgnorable reports whether err (or an error it wraps) was marked with
// Ignorable.
func IsIgnorable(err error) bool {
	var ig ignorable
	return errors.As(err, &ig)
}

// DefaultClassify is the Classify used when Config.Classify is nil:
//
//   - nil is Success;
//   - ErrTimeout (the breaker's own CallTimeout) is Timeout;
//   - an error marked with Ignorable is Ignored;
//   - context.Canceled is Canceled (the caller gave up);
//   - context.DeadlineExceeded is Timeout (Execute has already turned
//     it into Canceled if the caller's own context ran out);
//   - anything else is Failure.
//
// It is safe for concurrent use.
func DefaultClassify(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, ErrTimeout):
		return Timeout
	case IsIgnorable(err):
		return Ignored
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Failure
}
