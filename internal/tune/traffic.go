package tune

import (
	"time"

	"github.com/cbdash/cbdash"
)

// Second is the traffic of the typical instance in one second: the
// dependency's per-second outcomes divided among the instances that
// reported that second (fractions carried to the next second, so the
// totals over a range are the dependency's totals over its mean
// instance count). Successes, Failures (errors and panics) and Timeouts
// are outcomes the live breakers saw; Slow of them took at least the live
// slow-call duration. Estimated of them were rejected by the live
// breakers, so never seen: their outcomes are filled (see Typical).
type Second struct {
	At                                  time.Time
	Successes, Failures, Timeouts, Slow int64
	Estimated                           int64
	estimatedFailures                   int64 // of Failures
	// The dependency's calls (seen and rejected) and failures (seen, and
	// estimated among the rejected), for its failing episodes.
	depCalls, depFails float64
}

// Calls is how many recorded calls the second replays.
func (s Second) Calls() int64 { return s.Successes + s.Failures + s.Timeouts }

// splitter divides totals among instances, carrying the remainder.
type splitter struct{ acc [6]int64 }

func (sp *splitter) share(i int, total, n int64) int64 {
	sp.acc[i] += total
	v := sp.acc[i] / n
	sp.acc[i] -= v * n
	return v
}

// Typical turns per-second points (cbdash.Point, one dependency summed
// over its instances, Width 1 s) into the typical instance's seconds, in
// order. A point with no report count (Reports 0, a store before it was
// kept) counts as one instance.
//
// Rejected calls (rejected open or half-open full: the live breakers
// kept them from the dependency, so their outcomes were never seen) are
// filled with the failure rate of that second's admitted calls (the
// half-open probes') when there were any, else with the last failure rate
// seen, and counted in Estimated. Calls ignored or rejected by a hold
// (forced open) or the bulkhead are left out.
func Typical(points []cbdash.Point) []Second {
	out := make([]Second, 0, len(points))
	var sp splitter
	var carry float64 // estimated failures not yet whole
	lastRate := 0.0
	for _, p := range points {
		c := p.Counts
		n := max(p.Reports, 1)
		seen := c.Successes + c.Failures
		if seen > 0 {
			lastRate = float64(c.Failures) / float64(seen)
		}
		rej := c.RejectedOpen + c.RejectedHalfOpen
		s := Second{At: p.At, depCalls: float64(seen + rej), depFails: float64(c.Failures) + lastRate*float64(rej)}
		s.Successes = sp.share(0, c.Successes, n)
		s.Failures = sp.share(1, c.Failures-c.Timeouts, n)
		s.Timeouts = sp.share(2, c.Timeouts, n)
		s.Slow = sp.share(3, c.Slow, n)
		s.Estimated = sp.share(4, c.RejectedOpen+c.RejectedHalfOpen, n)
		s.fill(lastRate, &carry)
		out = append(out, s)
	}
	return out
}

// fill gives the second's estimated calls their outcomes: failures at
// rate, carried across seconds, the rest successes.
func (s *Second) fill(rate float64, carry *float64) {
	if s.Estimated == 0 {
		return
	}
	*carry += rate * float64(s.Estimated)
	f := min(int64(*carry), s.Estimated)
	*carry -= float64(f)
	s.estimatedFailures = f
	s.Failures += f
	s.Successes += s.Estimated - f
}
