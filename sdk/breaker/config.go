package breaker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// WindowKind selects how the sliding window keeps calls.
type WindowKind uint8

// Window kinds.
const (
	CountWindow WindowKind = iota // the last Size recorded calls (resilience4j COUNT_BASED)
	TimeWindow                    // the calls of the last Duration, in Buckets buckets (resilience4j TIME_BASED)
)

// String returns "count" or "time".
func (k WindowKind) String() string {
	if k == TimeWindow {
		return "time"
	}
	return "count"
}

// Window configures the sliding window whose failure rate and slow-call
// rate decide when a closed breaker opens. See the package documentation.
type Window struct {
	Kind WindowKind
	// Size is, for a count window, how many recorded calls it keeps;
	// 0 means 100.
	Size int
	// Duration is, for a time window, how far back it looks. Required
	// (> 0) for a time window.
	Duration time.Duration
	// Buckets is, for a time window, how many buckets Duration is cut
	// into: the window holds the current bucket and the Buckets-1 before
	// it, so it slides one bucket at a time. 0 means 10. Duration must be
	// a whole multiple of Buckets nanoseconds.
	Buckets int
}

// Backoff makes each open period after a failed probe longer than the one
// before: the next open duration is the previous one times Multiplier,
// capped at Max (resilience4j IntervalFunction.ofExponentialBackoff). It
// goes back to Config.OpenDuration when the breaker closes.
type Backoff struct {
	Multiplier float64       // 0 or 1: no backoff; otherwise >= 1
	Max        time.Duration // cap on each backed-off open duration (a cap below OpenDuration applies from the first failed probe on); 0 = no cap
	// Jitter spreads each open duration uniformly within +/- Jitter of
	// itself (0..1, a fraction), so that a fleet of instances does not
	// probe a recovering dependency in lockstep. 0 = none (tests and
	// scenarios always run without it).
	Jitter float64
}

// Config configures a Breaker. The zero value is a working configuration:
// every zero field means its documented default. See the package
// documentation for where each setting's semantics come from.
type Config struct {
	// Window is the sliding window; the zero value is a count window of
	// the last 100 calls.
	Window Window
	// FailureRateThreshold (percent, in (0, 100]) opens the breaker when
	// the failure rate in the window reaches it (>=). 0 means 50.
	FailureRateThreshold float64
	// SlowCallDuration makes a recorded call that took at least this long
	// slow, whether it succeeded or failed. 0 turns slow detection off.
	SlowCallDuration time.Duration
	// SlowCallRateThreshold (percent, in (0, 100]) opens the breaker when
	// the slow-call rate reaches it (>=), if slow detection is on. 0 means
	// 100.
	SlowCallRateThreshold float64
	// MinimumCalls is how many recorded calls the window must hold before
	// any rate is judged. 0 means 10. A count window smaller than
	// MinimumCalls never holds enough calls, so such a breaker never opens.
	MinimumCalls int
	// OpenDuration is how long the breaker stays open before it lets
	// probes through. 0 means 60s.
	OpenDuration time.Duration
	// OpenBackoff grows the open duration after each failed probe.
	OpenBackoff Backoff
	// HalfOpenMaxCalls is how many probes may be in flight at once while
	// half-open; more are rejected with ErrHalfOpenFull. 0 means 1.
	HalfOpenMaxCalls int
	// HalfOpenSuccessThreshold is how many consecutive successful probes
	// close the breaker. 0 means 1.
	HalfOpenSuccessThreshold int
	// CallTimeout ends a call still running this long after it started
	// as a Timeout failure, at that moment: the call's context is canceled
	// with ErrTimeout as its cause and the call's late result is thrown
	// away. 0 = no timeout.
	CallTimeout time.Duration
	// RampDuration, when > 0, ramps the breaker's recovery: after it
	// closes from half-open (enough probes succeeded), it admits a share
	// of the calls that rises linearly from 0 to all of them over
	// RampDuration (at t after closing, t/RampDuration of them, spread
	// evenly: each call adds the share at its time to a credit, and the
	// call that carries the credit past a whole number is admitted), and rejects
	// the rest with ErrRamp (reason "ramp", counted in
	// Totals.RejectedRamp, served by the fallback), so that a dependency
	// that has just come back is not hit at once by the whole load that
	// had been kept from it (Hystrix issue 1647; Envoy's slow start does
	// this for new endpoints). The admitted calls are recorded in the
	// closed window as always: if their failure rate or slow-call rate
	// reaches its threshold (with MinimumCalls), the breaker opens again
	// and the ramp is abandoned. A closing by an operator (release, reset,
	// a forced state's expiry) does not ramp, and any transition ends a
	// ramp. 0 (the default) = no ramp: the breaker admits every call as
	// soon as it closes, and pays nothing for the setting. A 20 s ramp
	// raises the admitted share by 5 % a second.
	RampDuration time.Duration
	// MaxConcurrent is the bulkhead: how many calls may be in flight at
	// once, in any state; more are rejected with ErrBulkheadFull. 0 = no
	// bulkhead.
	MaxConcurrent int
	// Classify maps a call's error to its outcome. nil means
	// DefaultClassify. It must be safe for concurrent use. If it panics,
	// the call is recorded as a Panic (a failure: a probe that ends so
	// reopens the breaker) and the panic goes on to the caller, as
	// gobreaker does for a panicking IsSuccessful; the breaker is never
	// left holding the call's slots.
	Classify func(error) Outcome
	// Clock is the time source. nil means the system's monotonic clock.
	// One that steps back or forward is handled as Clock describes: the
	// breaker's time never goes back, and goes on after a step back.
	Clock Clock
	// Logger receives the panics of observers (which are recovered). nil
	// discards them.
	Logger *slog.Logger
	// Shadows are up to MaxShadows other configurations run beside the
	// live one on the same calls, never enforced: each is fed every
	// outcome the breaker records and never rejects a call, and its
	// would-be transitions go to the observers of SubscribeShadows
	// (Transition.Shadow names it). See Shadow for what a shadow does
	// while its own state is open. nil (the default) costs nothing on
	// the call path.
	Shadows []Shadow
}

// MaxShadows is how many shadow configurations a breaker may carry.
const MaxShadows = 3

// Shadow is a named configuration run beside a breaker's live one
// without being enforced (Config.Shadows): the "what if these were my
// settings" of a dry run. Its semantics are those of Envoy's outlier
// detection with enforcing_* at 0 (ejections are computed and logged
// with enforced:false, never applied) and of resilience4j's METRICS_ONLY
// state, kept as a full state machine rather than a single state.
//
// A shadow is the breaker's own state machine (the same code, on the
// breaker's clock) with Config as its settings. It is told of each call
// the live breaker records, at the moment the call ends, with the
// call's outcome (as the live Classify gave it) and duration:
//
//   - closed: the outcome goes into the shadow's own sliding window
//     (slow by its own SlowCallDuration; a recorded call that ran at
//     least its own CallTimeout counts as a Timeout), and a failure rate
//     or slow-call rate reaching its threshold makes it open;
//   - open: it would have rejected the call, so the call's outcome is
//     not counted (the outcome of a call the shadow would not have made
//     says nothing about what it would have seen next);
//   - after its own open duration (with its own backoff) it is
//     half-open: the next calls' outcomes are its probes, up to
//     HalfOpenMaxCalls at once (a probe begins and ends with the call's
//     outcome), and they close it (HalfOpenSuccessThreshold consecutive
//     successes) or open it again (a failure, a timeout, a panic, a slow
//     probe), as they would the live breaker;
//   - with its own RampDuration, the calls its ramp would have rejected
//     after a recovery are not counted either.
//
// Ignored and canceled outcomes are not recorded, as for the live
// breaker. A shadow never changes a live decision: it is fed after the
// live breaker has recorded the call, and it rejects nothing. Operator
// commands (Apply) hold the live breaker only; a shadow goes on
// judging the calls the live breaker lets through. A shadow's
// transitions are delivered to SubscribeShadows observers outside any
// lock; a panic of theirs is recovered (and logged to the live
// Config.Logger) and never reaches the call.
type Shadow struct {
	// Name names the shadow in its transitions (Transition.Shadow) and
	// on the dashboard: non-empty, at most 128 bytes, unique among the
	// breaker's shadows.
	Name string
	// Config is the shadow's settings; zero fields take their defaults
	// as in New. Its Clock, Classify and Logger must be nil (the live
	// breaker's are used), its Shadows empty, and its MaxConcurrent 0
	// (a bulkhead limits calls in flight, which a shadow never holds).
	Config Config
}

// maxShadowName bounds Shadow.Name (the protocol's name limit).
const maxShadowName = 128

// shadowsWithDefaults validates the shadows of a live configuration and
// returns a copy of them with every default applied.
func shadowsWithDefaults(in []Shadow) ([]Shadow, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > MaxShadows {
		return nil, invalidf("Shadows has %d entries (at most %d)", len(in), MaxShadows)
	}
	out := make([]Shadow, len(in))
	for i, s := range in {
		p := fmt.Sprintf("Shadows[%d]", i)
		switch {
		case s.Name == "":
			return nil, invalidf("%s.Name is required", p)
		case len(s.Name) > maxShadowName:
			return nil, invalidf("%s.Name is longer than %d bytes", p, maxShadowName)
		case s.Config.Clock != nil, s.Config.Classify != nil, s.Config.Logger != nil:
			return nil, invalidf("%s (%q): Clock, Classify and Logger must be nil (a shadow uses the live breaker's)", p, s.Name)
		case len(s.Config.Shadows) > 0:
			return nil, invalidf("%s (%q): a shadow cannot have shadows", p, s.Name)
		case s.Config.MaxConcurrent != 0:
			return nil, invalidf("%s (%q): MaxConcurrent must be 0 (a shadow holds no calls in flight)", p, s.Name)
		}
		for _, o := range out[:i] {
			if o.Name == s.Name {
				return nil, invalidf("%s.Name %q is used twice", p, s.Name)
			}
		}
		c, err := s.Config.withDefaults()
		if err != nil {
			return nil, fmt.Errorf("%w (in %s %q)", err, p, s.Name)
		}
		c.Classify = nil // the live breaker's classifies; nil keeps Config() valid for New
		out[i] = Shadow{Name: s.Name, Config: c}
	}
	return out, nil
}

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("breaker: invalid config")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// Limits on sizes, so that a typo cannot allocate gigabytes.
const (
	maxCountWindow = 1 << 20
	maxBuckets     = 1 << 16
)

// withDefaults validates c and returns it with every default applied. The
// error names the bad field and wraps ErrInvalidConfig.
func (c Config) withDefaults() (Config, error) {
	w := &c.Window
	switch w.Kind {
	case CountWindow:
		if w.Size < 0 || w.Size > maxCountWindow {
			return c, invalidf("Window.Size must be within 1..%d (got %d)", maxCountWindow, w.Size)
		}
		if w.Size == 0 {
			w.Size = 100
		}
	case TimeWindow:
		if w.Duration <= 0 {
			return c, invalidf("Window.Duration must be > 0 for a time window (got %v)", w.Duration)
		}
		if w.Buckets < 0 || w.Buckets > maxBuckets {
			return c, invalidf("Window.Buckets must be within 1..%d (got %d)", maxBuckets, w.Buckets)
		}
		if w.Buckets == 0 {
			w.Buckets = 10
		}
		if w.Duration%time.Duration(w.Buckets) != 0 {
			return c, invalidf("Window.Buckets (%d) does not divide Window.Duration (%v)", w.Buckets, w.Duration)
		}
	default:
		return c, invalidf("Window.Kind %d is unknown", w.Kind)
	}
	if err := percent("FailureRateThreshold", &c.FailureRateThreshold, 50); err != nil {
		return c, err
	}
	if err := percent("SlowCallRateThreshold", &c.SlowCallRateThreshold, 100); err != nil {
		return c, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"SlowCallDuration", c.SlowCallDuration}, {"OpenDuration", c.OpenDuration},
		{"OpenBackoff.Max", c.OpenBackoff.Max}, {"CallTimeout", c.CallTimeout},
		{"RampDuration", c.RampDuration},
	} {
		if d.v < 0 {
			return c, invalidf("%s must not be negative (got %v)", d.name, d.v)
		}
	}
	if c.OpenDuration == 0 {
		c.OpenDuration = 60 * time.Second
	}
	b := &c.OpenBackoff
	if math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0) || b.Multiplier < 0 || (b.Multiplier > 0 && b.Multiplier < 1) {
		return c, invalidf("OpenBackoff.Multiplier must be 0 or >= 1 (got %v)", b.Multiplier)
	}
	if math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter > 1 {
		return c, invalidf("OpenBackoff.Jitter must be within 0..1 (got %v)", b.Jitter)
	}
	for _, n := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MinimumCalls", &c.MinimumCalls, 10}, {"HalfOpenMaxCalls", &c.HalfOpenMaxCalls, 1},
		{"HalfOpenSuccessThreshold", &c.HalfOpenSuccessThreshold, 1}, {"MaxConcurrent", &c.MaxConcurrent, 0},
	} {
		if *n.v < 0 {
			return c, invalidf("%s must not be negative (got %d)", n.name, *n.v)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	if c.Classify == nil {
		c.Classify = DefaultClassify
	}
	sh, err := shadowsWithDefaults(c.Shadows)
	if err != nil {
		return c, err
	}
	c.Shadows = sh
	return c, nil
}

func percent(name string, v *float64, def float64) error {
	if *v == 0 {
		*v = def
		return nil
	}
	if math.IsNaN(*v) || *v <= 0 || *v > 100 {
		return invalidf("%s must be within (0, 100] percent (got %v)", name, *v)
	}
	return nil
}
