package tune

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ErrNotReplayable is wrapped by BreakerConfig for settings that the
// sdk/breaker state machine cannot run: those of another library fed
// through an adapter (protocol.BreakerConfig.Library set, for example
// gobreaker's consecutive count), whose own logic the replay does not
// copy.
var ErrNotReplayable = errors.New("tune: settings not replayable")

// ErrBadCandidate is wrapped by ParseCandidate's errors.
var ErrBadCandidate = errors.New("tune: bad candidate")

// BreakerConfig turns reported settings (a breaker's hello, in
// protocol.BreakerConfig's units: percent, milliseconds, calls) into the
// sdk/breaker Config the replay runs, on clock c. Jitter and the bulkhead
// are left out (a replay has one instance and calls of no duration).
// Errors: ErrNotReplayable for an adapter's settings.
func BreakerConfig(s protocol.BreakerConfig, c breaker.Clock) (breaker.Config, error) {
	if s.Library != "" {
		return breaker.Config{}, fmt.Errorf("%w: %s settings (%s); give a candidate in sdk/breaker terms", ErrNotReplayable, s.Library, s.Name)
	}
	w := breaker.Window{Kind: breaker.CountWindow, Size: s.WindowSize}
	if s.WindowKind == "time" {
		w = breaker.Window{Kind: breaker.TimeWindow, Duration: ms(s.WindowMillis), Buckets: s.WindowBuckets}
	}
	return breaker.Config{
		Window: w, FailureRateThreshold: s.FailureRateThreshold,
		SlowCallDuration: ms(s.SlowCallDurationMillis), SlowCallRateThreshold: s.SlowCallRateThreshold,
		MinimumCalls: s.MinimumCalls, OpenDuration: ms(s.OpenDurationMillis),
		OpenBackoff:      breaker.Backoff{Multiplier: s.OpenBackoffMultiplier, Max: ms(s.OpenBackoffMaxMillis)},
		HalfOpenMaxCalls: s.HalfOpenMaxCalls, HalfOpenSuccessThreshold: s.HalfOpenSuccessThreshold,
		CallTimeout: ms(s.CallTimeoutMillis), Clock: c,
	}, nil
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// candidateKeys are the settings a candidate may change, each applied to
// a copy of the live settings.
var candidateKeys = map[string]func(*protocol.BreakerConfig, string) error{
	"failure-rate":    func(c *protocol.BreakerConfig, v string) error { return pct(&c.FailureRateThreshold, v) },
	"slow-call-rate":  func(c *protocol.BreakerConfig, v string) error { return pct(&c.SlowCallRateThreshold, v) },
	"minimum-calls":   func(c *protocol.BreakerConfig, v string) error { return count(&c.MinimumCalls, v) },
	"half-open-calls": func(c *protocol.BreakerConfig, v string) error { return count(&c.HalfOpenMaxCalls, v) },
	"open":            func(c *protocol.BreakerConfig, v string) error { return dur(&c.OpenDurationMillis, v) },
	"slow-call":       func(c *protocol.BreakerConfig, v string) error { return dur(&c.SlowCallDurationMillis, v) },
	"timeout":         func(c *protocol.BreakerConfig, v string) error { return dur(&c.CallTimeoutMillis, v) },
	"window":          window,
}

// CandidateKeys lists the keys ParseCandidate accepts, for help texts.
const CandidateKeys = "failure-rate=PCT, slow-call-rate=PCT, minimum-calls=N, window=N (calls) or DURATION (time window), open=DURATION, slow-call=DURATION, timeout=DURATION, half-open-calls=N"

// ParseCandidate applies spec ("failure-rate=40,minimum-calls=20,
// window=30s,open=10s"; keys in CandidateKeys) to a copy of live and
// returns it, adapter fields cleared (a candidate is sdk/breaker
// settings). Errors wrap ErrBadCandidate and name the bad key or value.
func ParseCandidate(live protocol.BreakerConfig, spec string) (protocol.BreakerConfig, error) {
	c := live
	c.Library, c.Settings = "", protocol.Settings{}
	if c.WindowKind == "" {
		c.WindowKind = "count"
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		set := candidateKeys[k]
		if !ok || set == nil {
			return c, fmt.Errorf("%w: %q is not KEY=VALUE with a key among %s", ErrBadCandidate, kv, CandidateKeys)
		}
		if err := set(&c, v); err != nil {
			return c, fmt.Errorf("%w: %s: %v", ErrBadCandidate, k, err)
		}
	}
	if _, err := breaker.New("candidate", must(BreakerConfig(c, nil))); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadCandidate, err)
	}
	return c, nil
}

func must(c breaker.Config, _ error) breaker.Config { return c }

func pct(dst *float64, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 100 {
		return fmt.Errorf("%q is not a percent in (0, 100]", v)
	}
	*dst = f
	return nil
}

func count(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a whole number >= 1", v)
	}
	*dst = n
	return nil
}

func dur(dst *int64, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration such as 30s", v)
	}
	*dst = d.Milliseconds()
	return nil
}

// window sets a count window of N calls, or a time window of DURATION in
// 10 buckets (fewer if they do not divide it: 1 per second at most).
func window(c *protocol.BreakerConfig, v string) error {
	if n, err := strconv.Atoi(v); err == nil && n >= 1 {
		c.WindowKind, c.WindowSize, c.WindowMillis, c.WindowBuckets = "count", n, 0, 0
		return nil
	}
	var m int64
	if err := dur(&m, v); err != nil || m < 1 {
		return fmt.Errorf("%q is neither a call count nor a duration", v)
	}
	b := 10
	for m%int64(b) != 0 {
		b--
	}
	c.WindowKind, c.WindowMillis, c.WindowBuckets = "time", m, b
	return nil
}

// Describe is a short text of s's deciding settings, for tables:
// "50% of 100 calls, min 10, open 60s".
func Describe(s protocol.BreakerConfig) string {
	w := fmt.Sprintf("%d calls", s.WindowSize)
	if s.WindowKind == "time" {
		w = ms(s.WindowMillis).String()
	}
	d := fmt.Sprintf("%g%% of %s, min %d, open %v", s.FailureRateThreshold, w, s.MinimumCalls, ms(s.OpenDurationMillis))
	if s.Library != "" {
		d = s.Library + " " + d
	}
	return d
}
