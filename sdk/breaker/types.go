package breaker

import "time"

// State is the state of a breaker. The zero value is Closed.
type State uint8

// The states of a breaker. Closed, Open and HalfOpen are the automatic
// states of the classic circuit breaker (Nygard, Hystrix, resilience4j);
// ForcedOpen and ForcedClosed are held by an operator command (resilience4j's
// FORCED_OPEN and METRICS_ONLY) and are left only by a command or by the
// command's expiry.
const (
	Closed       State = iota // calls pass and are recorded in the sliding window
	Open                      // calls are rejected until the open duration has passed
	HalfOpen                  // a limited number of probes pass; their results decide
	ForcedOpen                // an operator holds the breaker open: every call is rejected
	ForcedClosed              // an operator holds the breaker closed: calls are recorded, it never trips
)

var stateNames = [...]string{"closed", "open", "half_open", "forced_open", "forced_closed"}

// String returns the wire name of s, the same string as the matching
// sdk/protocol State* constant ("closed", "open", "half_open",
// "forced_open", "forced_closed").
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// ParseState returns the State whose String is s.
func ParseState(s string) (State, bool) {
	for i, n := range stateNames {
		if n == s {
			return State(i), true
		}
	}
	return 0, false
}

// Outcome is how a call ended, as the breaker records it.
type Outcome uint8

// Outcomes of a call. Failure, Timeout and Panic are failures of the
// dependency and are recorded in the sliding window; Ignored and Canceled
// are not recorded at all (only counted in Totals.Ignored).
const (
	Success  Outcome = iota // the call succeeded
	Failure                 // the call returned an error that is the dependency's fault
	Timeout                 // the call ran into the breaker's CallTimeout, or the dependency timed out
	Panic                   // the call panicked; the panic is passed on after it is recorded
	Ignored                 // an error that is no fault of the dependency (see Ignorable)
	Canceled                // the caller gave up: its context was canceled or ran out
)

var outcomeNames = [...]string{"success", "failure", "timeout", "panic", "ignored", "canceled"}

// String returns a lower-case name of o ("success", "failure", "timeout",
// "panic", "ignored", "canceled").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// failed reports whether o counts as a failure of the dependency.
func (o Outcome) failed() bool { return o == Failure || o == Timeout || o == Panic }

// recorded reports whether o is recorded in the sliding window.
func (o Outcome) recorded() bool { return o <= Panic }

// CauseKind says why a transition happened. Its values are the
// sdk/protocol Cause* strings.
type CauseKind string

// Transition causes.
const (
	CauseFailureRate     CauseKind = "failure_rate"     // closed > open: the failure rate reached its threshold
	CauseSlowCallRate    CauseKind = "slow_call_rate"   // closed > open: the slow-call rate reached its threshold
	CauseOpenElapsed     CauseKind = "open_elapsed"     // open > half_open: the open duration passed
	CauseProbeFailed     CauseKind = "probe_failed"     // half_open > open: a probe failed
	CauseProbesSucceeded CauseKind = "probes_succeeded" // half_open > closed: enough consecutive probes succeeded
	CauseCommand         CauseKind = "command"          // an operator command
	CauseExpired         CauseKind = "expired"          // forced_* > closed: the command's TTL ran out
)

// Cause says why a transition happened, with the figures that made it
// happen.
type Cause struct {
	Kind CauseKind
	// FailureRate, SlowCallRate (percent) and Window are the sliding window
	// at the moment a failure_rate or slow_call_rate trip happened;
	// Threshold is the threshold (percent) that was reached.
	FailureRate, SlowCallRate, Threshold float64
	Window                               WindowStats
	// ProbeOutcome is, for probe_failed, how the probe failed: "error",
	// "timeout", "panic" or "slow".
	ProbeOutcome string
	// Command is, for command and expired, the operator command.
	Command *Command
	// ExpiresAt is, for a transition into a forced state, when the forced
	// state runs out (zero: never).
	ExpiresAt time.Time
	// RampShare is, for a failure_rate or slow_call_rate trip during a
	// ramp (Config.RampDuration), the share of calls (0..1) the ramp was
	// admitting then: the ramp was abandoned. 0 otherwise.
	RampShare float64
}

// Transition is one state change of a breaker, as delivered to observers.
type Transition struct {
	Breaker    string
	From, To   State
	At         time.Time // when the state changed (for lazily seen changes, the moment they became due)
	Generation uint64    // the generation the breaker entered
	Cause      Cause
	// OpenDuration is, for a transition to Open, how long the breaker
	// stays open (after backoff and jitter); 0 otherwise.
	OpenDuration time.Duration
	// Shadow is, for a would-be transition of one of the breaker's
	// shadow configurations (Config.Shadows, delivered to
	// SubscribeShadows observers), the shadow's name: the transition
	// was not enforced. "" for the breaker's own transitions.
	Shadow string
}

// Action is an operator command's action. Its values are the sdk/protocol
// Action* strings.
type Action string

// Operator command actions.
const (
	ActionForceOpen   Action = "force_open"   // hold the breaker open: reject every call
	ActionForceClosed Action = "force_closed" // hold the breaker closed: record every call, never trip
	ActionRelease     Action = "release"      // end a forced state: closed, empty window
	ActionReset       Action = "reset"        // back to closed with an empty window, from any state
)

// Command is an operator command applied with Breaker.Apply.
type Command struct {
	ID     string        // the command's id, carried into the transition's cause
	Action Action        // what to do
	TTL    time.Duration // force_*: how long the forced state holds; 0 = until released
	Reason string        // why, for people
	Actor  string        // who, for people
}

// Totals are a breaker's cumulative counters since it was made. They are
// never reset, by a transition or by a command. Every admitted call is
// counted once in Admitted when it is admitted and once in exactly one of
// Successes, Errors, Timeouts, Panics or Ignored when it ends, whatever
// generation it was admitted in.
type Totals struct {
	Admitted  uint64
	Successes uint64
	Failures  uint64 // Errors + Timeouts + Panics
	Errors    uint64 // calls that ended with an error that is the dependency's fault
	Timeouts  uint64
	Panics    uint64
	Slow      uint64 // successes and failures that took at least SlowCallDuration (when it is set)
	Ignored   uint64 // Ignored and Canceled outcomes

	RejectedOpen         uint64
	RejectedHalfOpenFull uint64
	RejectedForcedOpen   uint64
	RejectedBulkhead     uint64
	RejectedRamp         uint64 // calls the ramp after a recovery did not admit yet (Config.RampDuration)

	FallbackSuccesses uint64 // fallbacks that returned no error
	FallbackFailures  uint64 // fallbacks that returned an error

	// Misuse counts ends of two-step calls that had already ended (a
	// second Done or Report of one Call): a bug in the caller, each one
	// ignored and counted here only.
	Misuse uint64
}

// Rejected is the sum of every rejection reason.
func (t Totals) Rejected() uint64 {
	return t.RejectedOpen + t.RejectedHalfOpenFull + t.RejectedForcedOpen + t.RejectedBulkhead + t.RejectedRamp
}

// WindowStats is the sliding window as the breaker judges it at one moment.
type WindowStats struct {
	Calls, Failures, Slow int64
	FailureRate           float64 // percent of Calls, 0 when Calls is 0
	SlowCallRate          float64 // percent of Calls, 0 when Calls is 0
}

func makeStats(calls, failures, slow int64) WindowStats {
	s := WindowStats{Calls: calls, Failures: failures, Slow: slow}
	if calls > 0 {
		s.FailureRate = float64(failures) * 100 / float64(calls)
		s.SlowCallRate = float64(slow) * 100 / float64(calls)
	}
	return s
}

// LatencyBounds are the inclusive upper bounds of the latency histogram in
// Snapshot.Latency; a last bucket counts the calls slower than the last
// bound. They equal sdk/protocol.LatencyBoundsMillis, so that histograms
// from many instances can be merged by adding bucket counts.
var LatencyBounds = []time.Duration{
	1 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, 1 * time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// latencyBounds is a private copy of LatencyBounds in nanoseconds, so that
// a caller changing the exported slice cannot change the histogram.
var latencyBounds = [...]int64{1e6, 2e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6, 1e9, 2.5e9, 5e9, 10e9}

const numLatencyBuckets = len(latencyBounds) + 1

// Snapshot is a breaker's state and counters at one moment.
type Snapshot struct {
	Name       string
	State      State
	Generation uint64
	At         time.Time
	// Since is when the breaker entered State: the time of the transition
	// into it (for a lazily seen open > half_open, the moment it became
	// due), or when the breaker was made if it has always been closed. A
	// release or reset of a closed breaker makes no transition and leaves
	// it.
	Since  time.Time
	Totals Totals
	// Latency holds len(LatencyBounds)+1 cumulative bucket counts: bucket
	// i counts ended calls that took <= LatencyBounds[i] and more than the
	// bound before it; the last bucket counts the rest. While some
	// breaker of the process is hot, successful closed calls may be
	// measured with a 1 ms coarse clock (see the package documentation,
	// The clock).
	Latency    []uint64
	LatencySum time.Duration // sum of the latencies counted in Latency
	InFlight   int64         // calls admitted and not yet ended
	// Window is the sliding window as judged now; zero while open,
	// half-open or forced open (no window is kept then).
	Window                                      WindowStats
	FailureRateThreshold, SlowCallRateThreshold float64 // percent; SlowCallRateThreshold is 0 when slow detection is off
	MinimumCalls                                int
	ForcedUntil                                 time.Time // when a forced state runs out; zero = not forced or no expiry
	// RampUntil is, while the breaker ramps up after a recovery
	// (Config.RampDuration), when the ramp ends; zero otherwise.
	// RampShare is the share of calls (0..1) it admits now; 1 when not
	// ramping.
	RampUntil time.Time
	RampShare float64
	Forced    *Command // the command holding a forced state, nil otherwise
	// ClockStepsBack counts the steps back of Config.Clock since the
	// breaker was made (a clock without a monotonic reading set back, by
	// NTP or by hand, or read before the breaker was made): the readings
	// that would have put the breaker's time before the latest time it
	// had seen. Each such reading was taken as the latest time seen, and
	// the breaker's time went on from there at the clock's rate (see
	// Clock), so the readings after a step are not counted again. A step
	// that no reading sees (the clock set back and forward again between
	// two readings) is not counted; one raced by concurrent readings may
	// be counted twice. It also counts the readings ignored for being more
	// than about 73 years from the breaker's creation (see Clock). Always 0
	// with the system clock.
	ClockStepsBack int64
}
