package tune

import (
	"slices"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Episode is a stretch of the recorded traffic in which the dependency
// was failing: its failure rate over the last Smooth seconds at least
// Margin points above its normal failure rate (the lower quartile of the
// same: a range mostly spent in an outage still has its quiet part),
// for at least EpisodeMin seconds, gaps of under EpisodeGap merged; it
// starts where the per-second rate first rose above that bar
// (riseStart). A trip inside one (or up to EpisodeGap after it) is a true trip; a trip
// outside every one is counted as likely false. The calls the live
// breakers rejected count with the failure rate filled in (see Typical).
type Episode struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"` // exclusive
}

// Episode thresholds.
const (
	Margin     = 10.0 // percentage points above the normal failure rate
	Smooth     = 10   // seconds over which the failure rate is taken
	EpisodeMin = 3    // elevated seconds at least
	EpisodeGap = 5 * time.Second
)

// rolling returns the dependency's failure rate (percent) over the Smooth
// seconds up to each second; -1 for a second with no calls in them.
func rolling(seconds []Second) []float64 {
	out := make([]float64, len(seconds))
	var calls, fails float64
	for i, s := range seconds {
		calls, fails = calls+s.depCalls, fails+s.depFails
		if i >= Smooth {
			calls, fails = calls-seconds[i-Smooth].depCalls, fails-seconds[i-Smooth].depFails
		}
		out[i] = -1
		if calls > 0.5 {
			out[i] = 100 * fails / calls
		}
	}
	return out
}

// NormalRate is the lower quartile of the dependency's failure rate
// (percent, over Smooth seconds) over the range; 0 with no calls.
func NormalRate(seconds []Second) float64 {
	return quartile(rolling(seconds))
}

// quartile is the lower quartile of the rates that are not negative.
func quartile(rates []float64) float64 {
	r := slices.DeleteFunc(slices.Clone(rates), func(v float64) bool { return v < 0 })
	if len(r) == 0 {
		return 0
	}
	slices.Sort(r)
	return r[len(r)/4]
}

// Episodes finds the failing episodes of seconds (see Episode).
func Episodes(seconds []Second) []Episode {
	rates := rolling(seconds)
	bar := quartile(rates) + Margin
	var eps []Episode
	var cur Episode
	n := 0
	for i, s := range seconds {
		if rates[i] < bar {
			continue
		}
		if n > 0 && s.At.Sub(cur.To) >= EpisodeGap {
			eps = keep(eps, cur, n)
			n = 0
		}
		if n == 0 {
			cur.From = riseStart(seconds, i, bar)
		}
		cur.To = s.At.Add(time.Second)
		n++
	}
	return keep(eps, cur, n)
}

// riseStart walks back from second i, whose rate over Smooth seconds is
// elevated, over the seconds before it (Smooth at most) whose own rate
// is already above bar: the trailing rate lags the rise it averages.
func riseStart(seconds []Second, i int, bar float64) time.Time {
	j := i
	for j > 0 && i-j < Smooth {
		p := seconds[j-1]
		if p.depCalls < 0.5 || 100*p.depFails/p.depCalls < bar {
			break
		}
		j--
	}
	return seconds[j].At
}

func keep(eps []Episode, ep Episode, n int) []Episode {
	if n >= EpisodeMin {
		eps = append(eps, ep)
	}
	return eps
}

// score fills run's trips, time open, flaps, false trips and detection
// time from its transitions, the range ending at end.
func score(run *Run, eps []Episode, end time.Time) {
	var openAt, closedAt time.Time
	var detect float64
	inEp := 0
	for _, t := range run.Transitions {
		switch {
		case t.From == protocol.StateClosed && t.To == protocol.StateOpen:
			run.Trips++
			openAt = t.At
			if !closedAt.IsZero() && t.At.Sub(closedAt) <= FlapWindow {
				run.Flaps++
			}
			if ep, ok := episodeOf(eps, t.At); ok {
				inEp++
				detect += t.At.Sub(ep.From).Seconds()
			} else {
				run.FalseTrips++
			}
		case t.To == protocol.StateClosed && !openAt.IsZero():
			run.OpenSeconds += t.At.Sub(openAt).Seconds()
			openAt, closedAt = time.Time{}, t.At
		}
	}
	if !openAt.IsZero() {
		run.OpenSeconds += end.Sub(openAt).Seconds()
	}
	if inEp > 0 {
		run.DetectSeconds = detect / float64(inEp)
	}
}

// episodeOf returns the episode a trip at t belongs to: t within it or
// up to EpisodeGap after it (a window still full of its failures).
func episodeOf(eps []Episode, t time.Time) (Episode, bool) {
	for _, ep := range eps {
		if !t.Before(ep.From) && t.Before(ep.To.Add(EpisodeGap)) {
			return ep, true
		}
	}
	return Episode{}, false
}
