package cbdash

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Stop condition metrics: what a drill's stop condition watches, computed
// by the collector over the window reports of the breakers a hold covers
// that arrived in the last StopWindow.
const (
	// StopFallbackFailureRate is the percent of rejected calls whose
	// fallback failed: FallbackFailure over Rejected (at most 100).
	StopFallbackFailureRate = "fallback-failure-rate"
	// StopErrorRate is the callers' error rate in percent (HoldPeriod's
	// ErrorRate: failures and rejections a fallback did not answer).
	StopErrorRate = "error-rate"
	// StopP99 is the 99th percentile latency in milliseconds of the calls
	// the covered breakers admitted. The protocol carries no latency of
	// fallbacks themselves: under force open this is the latency of the
	// calls still admitted (probes, uncovered paths), under force closed
	// that of every call.
	StopP99 = "p99"
)

// StopWindow is the span of window reports a stop condition is computed
// over (those that arrived in the last StopWindow, counted by the quarter
// second of their arrival: 1 to 1.25 s), and StopMinCalls the
// calls (rejected calls for StopFallbackFailureRate) below which a rate
// is not computed: a drill is not stopped by one failed fallback.
const (
	StopWindow   = time.Second
	StopMinCalls = 10
)

// StopCondition stops a drill (releases its hold) when Metric is above
// Above for at least For. It is written, and read (ParseStopCondition),
// as the CLI takes it: "fallback-failure-rate>20%", "error-rate>30% for
// 10s", "p99>500ms"; in JSON it is that string.
type StopCondition struct {
	Metric string        // one of the Stop* metrics
	Above  float64       // percent for the rates, milliseconds for StopP99
	For    time.Duration // how long the metric must stay above; 0 = at the first check
}

// ParseStopCondition reads "METRIC>VALUE[%|ms] [for DURATION]". Errors
// wrap ErrInvalid and quote the input.
func ParseStopCondition(s string) (StopCondition, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: stop condition %q: %s (for example 'fallback-failure-rate>20%%', 'error-rate>30%% for 10s', 'p99>500ms')",
			ErrInvalid, truncate(s, 80), why)
	}
	expr, dur, hasFor := strings.Cut(strings.TrimSpace(s), " for ")
	metric, value, ok := strings.Cut(expr, ">")
	if !ok {
		return StopCondition{}, bad("no '>'")
	}
	c := StopCondition{Metric: strings.TrimSpace(metric)}
	value = strings.TrimSpace(value)
	unit := "%"
	if c.Metric == StopP99 {
		unit = "ms"
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(value, unit), 64)
	if err != nil {
		return StopCondition{}, bad("the value is not a number of " + unit)
	}
	c.Above = v
	if hasFor {
		if c.For, err = time.ParseDuration(strings.TrimSpace(dur)); err != nil {
			return StopCondition{}, bad("the duration after 'for' is not a Go duration (10s, 1m)")
		}
	}
	if err := c.Validate(); err != nil {
		return StopCondition{}, bad(strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return c, nil
}

// Validate checks the condition; errors wrap ErrInvalid.
func (c StopCondition) Validate() error {
	switch {
	case c.Metric != StopFallbackFailureRate && c.Metric != StopErrorRate && c.Metric != StopP99:
		return fmt.Errorf("%w: metric %q is not %s, %s or %s", ErrInvalid, truncate(c.Metric, 40),
			StopFallbackFailureRate, StopErrorRate, StopP99)
	case math.IsNaN(c.Above) || c.Above < 0 || (c.Metric != StopP99 && c.Above >= 100) || c.Above > 1e7:
		return fmt.Errorf("%w: the value must be within 0..100 %% for a rate, 0..10000000 ms for p99", ErrInvalid)
	case c.For < 0 || c.For > time.Hour:
		return fmt.Errorf("%w: 'for' must be within 0..1h", ErrInvalid)
	}
	return nil
}

// String writes the condition as ParseStopCondition reads it.
func (c StopCondition) String() string {
	unit := "%"
	if c.Metric == StopP99 {
		unit = "ms"
	}
	s := c.Metric + ">" + strconv.FormatFloat(c.Above, 'f', -1, 64) + unit
	if c.For > 0 {
		s += " for " + c.For.String()
	}
	return s
}

// MarshalText writes String.
func (c StopCondition) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads ParseStopCondition's form.
func (c *StopCondition) UnmarshalText(b []byte) error {
	v, err := ParseStopCondition(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// words names the metric for a reason: "fallback failure rate".
func (c StopCondition) words() string {
	switch c.Metric {
	case StopFallbackFailureRate:
		return "fallback failure rate"
	case StopErrorRate:
		return "error rate"
	}
	return "p99"
}

// Figure writes a value of the condition's metric: "86 %", "1200 ms".
func (c StopCondition) Figure(v float64) string {
	if c.Metric == StopP99 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + " %"
}

// HoldBreach is the stop condition that ended a drill: its value over the
// last StopWindow when the collector found it above, when, and the
// instances (as "service/instance", the worst first, at most 5) whose
// own figure was above it then.
type HoldBreach struct {
	Condition StopCondition `json:"condition"`
	Value     float64       `json:"value"`
	At        time.Time     `json:"at"`
	Instances []string      `json:"instances"`
	// Step is the step of a stepped drill (from 1) the breach ended; 0
	// for a drill without steps.
	Step int `json:"step,omitempty"`
}

// Reason is the release reason of a hold a breach stopped: "stop
// condition: fallback failure rate 86 % > 20 % at 15:02:57" (UTC).
func (b HoldBreach) Reason() string {
	c := b.Condition
	s := fmt.Sprintf("stop condition: %s %s > %s", c.words(), c.Figure(b.Value), c.Figure(c.Above))
	if c.For > 0 {
		s += " for " + c.For.String()
	}
	return s + " at " + b.At.UTC().Format("15:04:05")
}

// StopActor is the actor of a release a stop condition made.
const StopActor = "cbdash (stop condition)"

// EffectiveStops is the stop conditions of a hold: defaults less those
// drop names (each written as String; "*" drops them all), then stopIf,
// without duplicates. Errors wrap ErrInvalid: a dropped condition that is
// not a default.
func EffectiveStops(defaults []StopCondition, drop []string, stopIf []StopCondition) ([]StopCondition, error) {
	dropped := map[string]bool{}
	for _, d := range drop {
		dropped[strings.TrimSpace(d)] = true
	}
	out := []StopCondition{}
	seen := map[string]bool{}
	for _, c := range defaults {
		if dropped["*"] || dropped[c.String()] {
			delete(dropped, c.String())
			continue
		}
		out, seen[c.String()] = append(out, c), true
	}
	delete(dropped, "*")
	for d := range dropped {
		return nil, fmt.Errorf("%w: %q is not one of the server's default stop conditions", ErrInvalid, truncate(d, 80))
	}
	for _, c := range stopIf {
		if !seen[c.String()] {
			out, seen[c.String()] = append(out, c), true
		}
	}
	return out, nil
}

// HoldStep is one step of a stepped drill: the hold covers Share percent
// of the instances (chosen as Selector.Share chooses them, so each step's
// instances include the previous step's) for For, then the next step
// follows if no stop condition was breached. The last step lasts until
// the hold ends.
type HoldStep struct {
	Share float64       `json:"share"` // percent, within (0, 100]
	For   time.Duration `json:"for"`   // > 0
}

// ParseSteps reads "5%:1m,25%:2m,100%:5m". Errors wrap ErrInvalid.
func ParseSteps(s string) ([]HoldStep, error) {
	var out []HoldStep
	for part := range strings.SplitSeq(s, ",") {
		share, dur, ok := strings.Cut(strings.TrimSpace(part), ":")
		v, err1 := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(share), "%"), 64)
		d, err2 := time.ParseDuration(strings.TrimSpace(dur))
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: step %q is not SHARE%%:DURATION (for example 5%%:1m,25%%:2m,100%%:5m)", ErrInvalid, truncate(part, 40))
		}
		out = append(out, HoldStep{Share: v, For: d})
	}
	return out, ValidateSteps(out)
}

// ValidateSteps checks steps: at most 10, shares growing within (0, 100],
// each For > 0. Errors wrap ErrInvalid.
func ValidateSteps(steps []HoldStep) error {
	if len(steps) > 10 {
		return fmt.Errorf("%w: at most 10 steps", ErrInvalid)
	}
	prev := 0.0
	for i, st := range steps {
		if math.IsNaN(st.Share) || st.Share <= prev || st.Share > 100 || st.For <= 0 {
			return fmt.Errorf("%w: step %d: shares must grow within (0, 100] %% and each step last > 0", ErrInvalid, i+1)
		}
		prev = st.Share
	}
	return nil
}

// StepAt returns the step (from 1) of steps in force d after the hold's
// start and its share; 0 and 0 without steps.
func StepAt(steps []HoldStep, d time.Duration) (step int, share float64) {
	for i, st := range steps {
		step, share = i+1, st.Share
		if d < st.For {
			break
		}
		d -= st.For
	}
	return step, share
}

// FallbackRun is the last run of a dependency's fallbacks under an open or
// forced-open breaker: the fallbacks counted in window reports that also
// rejected calls (any instance), summed over reports that ended no more
// than FallbackRunGap apart, up to the last one.
type FallbackRun struct {
	LastServed time.Time `json:"last_served"` // end of the last such report (agent clock)
	Served     int64     `json:"served"`      // fallbacks that succeeded
	Failed     int64     `json:"failed"`      // fallbacks that failed
	// SuccessShare is Served of Served+Failed, in percent.
	SuccessShare float64 `json:"success_share"`
}

// FallbackRunGap is the longest pause within one run of fallbacks.
const FallbackRunGap = time.Minute

// NextFallbackRun is run after window report w: w counts when it rejected
// calls and counted fallbacks; a report more than FallbackRunGap after the
// run's last starts a new run. A report older than the run's last adds to
// it without moving LastServed.
func NextFallbackRun(run FallbackRun, w protocol.Window) FallbackRun {
	c := w.Counts
	if c.Rejected() == 0 || c.FallbackSuccess+c.FallbackFailure == 0 {
		return run
	}
	end := time.UnixMilli(w.Start + w.Millis).UTC()
	if end.Sub(run.LastServed) > FallbackRunGap {
		run = FallbackRun{}
	}
	if end.After(run.LastServed) {
		run.LastServed = end
	}
	run.Served = protocol.SatAdd(run.Served, c.FallbackSuccess)
	run.Failed = protocol.SatAdd(run.Failed, c.FallbackFailure)
	run.SuccessShare = 100 * float64(run.Served) / float64(run.Served+run.Failed)
	return run
}

// FallbackFreshness is what the store knows of one dependency's
// fallbacks across restarts (the live FallbackRun is lost with the
// collector): when the breaker was first known and when its fallbacks
// last served calls it rejected.
type FallbackFreshness struct {
	DependencyKey
	// KnownSince is the first_seen of the earliest instance that declared
	// the breaker; zero when no instance declares it.
	KnownSince time.Time `json:"known_since"`
	// LastServed is the end of the last stored window bucket (second,
	// minute or hour, the finest kept) in which the dependency both
	// rejected calls and counted fallbacks; zero when none is kept.
	LastServed time.Time `json:"last_served,omitzero"`
}
