package cbdash

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Quorum-advised trips (issue 35): when enough of a dependency's
// instances have opened on their own, the collector advises the others to
// open for a short while, as a hold of its own (actor QuorumActor) on
// the instances that have not tripped. The rules below decide when; the
// collector's quorum advisor (internal/quorum) acts on them.

// QuorumActor is the actor of a quorum advisory: the hold the collector
// creates, and its release at the quorum's first close.
const QuorumActor = "cbdash (quorum)"

// Defaults of a QuorumRule's fields.
const (
	DefaultQuorumPercent = 50
	DefaultQuorumMin     = 3
	// DefaultQuorumBox is the advisory's time box when neither the rule
	// nor the tripped instances' open duration says one.
	DefaultQuorumBox = 30 * time.Second
	// MaxQuorumProbes bounds QuorumRule.Probes.
	MaxQuorumProbes = 100
)

// QuorumRule says for which dependencies quorum advisories are on, and
// when. A dependency takes the first rule (in the order given) whose
// Service and Breaker match it ("*" matches any); none: off.
type QuorumRule struct {
	Service string // a service or "*"
	Breaker string // a breaker or "*"
	// Off turns advisories off for the dependencies the rule matches (a
	// per-dependency kill switch ahead of a broader rule).
	Off bool
	// Percent is Q: the share (percent, 0 < Q <= 100) of the instances at
	// their minimum calls that must have tripped; 0 = 50.
	Percent float64
	// Min is M: at least this many instances must have tripped; 0 = 3.
	Min int
	// Box is how long an advisory lasts at most; 0 = the longest open
	// duration of the tripped instances' breakers (their hello's), or
	// DefaultQuorumBox when none says one.
	Box time.Duration
	// Probes is K of the probe rotation (issue 35): while the quorum is
	// met, only K of the instances open on their own probe the
	// dependency per open interval, in turn; the others' probes are
	// deferred (protocol.ActionDeferProbes) until the probes' verdict.
	// 0 = off (every instance probes on its own timer, the default).
	Probes int
	// Spread is the probe rotation's stagger: at the verdict closed, the
	// waiting instances are let probe (and so close and ramp) at offsets
	// spread evenly over it, so that they do not return together; 0 =
	// the longest ramp of the dependency's breakers (their hello's
	// ramp_ms), else its open duration.
	Spread time.Duration
}

// ParseQuorumRule reads "SERVICE/BREAKER:q=50%,m=3,box=30s,probes=1,spread=20s" (each setting
// optional, "SERVICE/BREAKER" alone takes the defaults) or
// "SERVICE/BREAKER:off"; SERVICE and BREAKER may be "*". Errors wrap
// ErrInvalid and quote the input.
func ParseQuorumRule(s string) (QuorumRule, error) {
	bad := func(why string) (QuorumRule, error) {
		return QuorumRule{}, fmt.Errorf("%w: quorum rule %q: %s", ErrInvalid, truncate(s, 100), why)
	}
	target, settings, _ := strings.Cut(strings.TrimSpace(s), ":")
	svc, br, ok := strings.Cut(target, "/")
	if !ok || strings.TrimSpace(svc) == "" || strings.TrimSpace(br) == "" || strings.Contains(br, "/") {
		return bad("the target is not SERVICE/BREAKER (either may be *)")
	}
	r := QuorumRule{Service: svc, Breaker: br}
	if strings.TrimSpace(settings) == "off" {
		r.Off = true
		return r, nil
	}
	for _, kv := range strings.Split(settings, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		if err := r.set(kv); err != nil {
			return bad(err.Error())
		}
	}
	return r, r.Validate()
}

// set reads one "key=value" of a rule.
func (r *QuorumRule) set(kv string) error {
	k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
	var err error
	switch k {
	case "q":
		r.Percent, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	case "m":
		r.Min, err = strconv.Atoi(v)
	case "box":
		r.Box, err = time.ParseDuration(v)
	case "probes":
		r.Probes, err = strconv.Atoi(v)
	case "spread":
		r.Spread, err = time.ParseDuration(v)
	default:
		return fmt.Errorf("unknown setting %q (q, m, box, probes, spread or off)", truncate(k, 20))
	}
	if err != nil {
		return fmt.Errorf("%s: %q is not a number or duration", k, truncate(v, 20))
	}
	return nil
}

// Validate checks the rule; errors wrap ErrInvalid and name the field.
func (r QuorumRule) Validate() error {
	switch {
	case strings.TrimSpace(r.Service) == "" || strings.TrimSpace(r.Breaker) == "":
		return fmt.Errorf("%w: quorum rule %q: service and breaker are required (either may be *)", ErrInvalid, r.Target())
	case math.IsNaN(r.Percent) || r.Percent < 0 || r.Percent > 100:
		return fmt.Errorf("%w: quorum rule %s: q must be within 0..100 (percent)", ErrInvalid, r.Target())
	case r.Min < 0:
		return fmt.Errorf("%w: quorum rule %s: m is negative", ErrInvalid, r.Target())
	case r.Box < 0:
		return fmt.Errorf("%w: quorum rule %s: box is negative", ErrInvalid, r.Target())
	case r.Probes < 0 || r.Probes > MaxQuorumProbes:
		return fmt.Errorf("%w: quorum rule %s: probes must be within 0..%d", ErrInvalid, r.Target(), MaxQuorumProbes)
	case r.Spread < 0:
		return fmt.Errorf("%w: quorum rule %s: spread is negative", ErrInvalid, r.Target())
	}
	return nil
}

// Target is the rule's "SERVICE/BREAKER".
func (r QuorumRule) Target() string { return r.Service + "/" + r.Breaker }

// String writes the rule as ParseQuorumRule reads it, with its
// defaults filled: "checkout/*:q=50%,m=3,box=30s" (no box: the breakers'
// open duration).
func (r QuorumRule) String() string {
	if r.Off {
		return r.Target() + ":off"
	}
	s := r.Target() + ":q=" + strconv.FormatFloat(r.percent(), 'f', -1, 64) + "%,m=" + strconv.Itoa(r.min())
	if r.Box > 0 {
		s += ",box=" + r.Box.String()
	}
	if r.Probes > 0 {
		s += ",probes=" + strconv.Itoa(r.Probes)
	}
	if r.Spread > 0 {
		s += ",spread=" + r.Spread.String()
	}
	return s
}

func (r QuorumRule) percent() float64 {
	if r.Percent == 0 {
		return DefaultQuorumPercent
	}
	return r.Percent
}

func (r QuorumRule) min() int {
	if r.Min == 0 {
		return DefaultQuorumMin
	}
	return r.Min
}

// Matches reports whether the rule covers dependency k.
func (r QuorumRule) Matches(k DependencyKey) bool {
	return (r.Service == "*" || r.Service == k.Service) && (r.Breaker == "*" || r.Breaker == k.Breaker)
}

// QuorumRuleFor returns the first of rules that matches k; ok is false
// when none does or the one that does is Off.
func QuorumRuleFor(rules []QuorumRule, k DependencyKey) (r QuorumRule, ok bool) {
	for _, r := range rules {
		if r.Matches(k) {
			return r, !r.Off
		}
	}
	return QuorumRule{}, false
}

// Quorum is what a dependency's live instances say about it now, as a
// quorum rule reads it. Stale instances and instances in a forced state
// (held by an operator, or advised) count nowhere.
type Quorum struct {
	// Eligible counts the instances that have tripped or reached their
	// breaker's minimum calls: the quorum's denominator.
	Eligible int
	// Open lists the instances open or half-open on their own (by their
	// own rule), sorted.
	Open []string
	// Over lists the closed instances at their minimum calls whose last
	// window is at or over a threshold of their breaker: they judge the
	// dependency failing and would trip at their next call.
	Over []string
	// Closed lists the closed instances not in Over: those an advisory
	// goes to (with Over), whether or not they reached their minimum
	// calls.
	Closed []string
	// OpenFor is the longest open duration of the breakers in Open (their
	// hello's configuration); 0 when none says one.
	OpenFor time.Duration
}

// Tripped counts the instances that make the quorum: Open and Over.
func (q Quorum) Tripped() int { return len(q.Open) + len(q.Over) }

// Share is Tripped as a percent of Eligible (0 when none is).
func (q Quorum) Share() float64 {
	if q.Eligible == 0 {
		return 0
	}
	return 100 * float64(q.Tripped()) / float64(q.Eligible)
}

// Met reports whether q reaches rule r: at least r's Min tripped, and at
// least r's Percent of the eligible instances. One instance of twenty with
// a bad path is 5 % and one instance: never a quorum.
func (q Quorum) Met(r QuorumRule) bool {
	return !r.Off && q.Tripped() >= max(r.min(), 1) && q.Share() >= r.percent()
}

// QuorumOf reads a dependency's live instance lines (Dependency's
// PerInstance).
func QuorumOf(lines []*InstanceBreaker) Quorum {
	var q Quorum
	for _, ib := range lines {
		if ib.Stale {
			continue
		}
		switch ib.State {
		case protocol.StateOpen, protocol.StateHalfOpen:
			q.Eligible++
			q.Open = append(q.Open, ib.Instance)
			if ib.Config != nil {
				q.OpenFor = max(q.OpenFor, time.Duration(ib.Config.OpenDurationMillis)*time.Millisecond)
			}
		case protocol.StateClosed:
			atMin, over := judged(ib.Last)
			if atMin {
				q.Eligible++
			}
			if over {
				q.Over = append(q.Over, ib.Instance)
			} else {
				q.Closed = append(q.Closed, ib.Instance)
			}
		}
	}
	return q
}

// judged reports whether window w's sliding window has reached its
// minimum calls, and whether it is then at or over one of its thresholds.
func judged(w *protocol.Window) (atMin, over bool) {
	if w == nil {
		return false, false
	}
	h := w.Headroom
	if h.Calls == 0 || h.Calls < h.MinimumCalls {
		return false, false
	}
	over = (h.FailureRateThreshold > 0 && h.FailureRate >= h.FailureRateThreshold) ||
		(h.SlowCallRateThreshold > 0 && h.SlowCallRate >= h.SlowCallRateThreshold)
	return true, over
}

// Box is how long an advisory under rule r lasts at most, given q: r's
// Box, else q's OpenFor, else DefaultQuorumBox; at least a second and at
// most maxHold (0 = DefaultMaxHold).
func (q Quorum) Box(r QuorumRule, maxHold time.Duration) time.Duration {
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	box := cmp.Or(r.Box, q.OpenFor, DefaultQuorumBox)
	return min(max(box, time.Second), maxHold)
}

// Reason writes the advisory's reason, the audit's "why": the rule and
// the figures. "quorum: 6 of 8 instances at minimum calls tripped on
// their own (75 % >= 50 %, at least 3: i1, i2, i3, i4, i5 and 1 more)
// under rule checkout/*:q=50%,m=3; open for 30s or until one of them
// closes".
func (q Quorum) Reason(r QuorumRule, box time.Duration) string {
	names := append(append([]string{}, q.Open...), q.Over...)
	list := strings.Join(names[:min(len(names), 5)], ", ")
	if len(names) > 5 {
		list += fmt.Sprintf(" and %d more", len(names)-5)
	}
	return fmt.Sprintf("quorum: %d of %d instances at minimum calls tripped on their own (%s %% >= %s %%, at least %d: %s) under rule %s; open for %v or until one of them closes",
		q.Tripped(), q.Eligible, strconv.FormatFloat(math.Round(q.Share()*10)/10, 'f', -1, 64),
		strconv.FormatFloat(r.percent(), 'f', -1, 64), r.min(), list, r.String(), box)
}
