package cbdash

import "github.com/cbdash/cbdash/sdk/protocol"

// ShownRate is a failure or slow-call rate as the dashboard, the JSON API
// and the CLI show it: one rule (RatesOf), so the three never disagree.
// It holds the figures; their words are internal/wording's (Rate).
type ShownRate struct {
	// Label names the rate and where it comes from: "failure rate" (the
	// sliding window of a closed breaker), "failure rate, tripped at" (the
	// rate that tripped an open or half-open breaker, at the trip),
	// "slow-call rate, at trip" (the other rate of that window) or
	// "failure rate, last min" (an open breaker whose trip is unknown).
	Label string `json:"label"`
	// Value is the rate in percent; Threshold its threshold in percent, 0
	// when there is none (slow-call detection off).
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Judged is false while a closed breaker's window holds fewer calls
	// than its minimum: the breaker cannot open yet, whatever Value says.
	Judged bool `json:"judged"`
	// Calls and MinimumCalls are the window's calls and its minimum while
	// not judged (0 otherwise), for the words "not judged yet (1 of 20
	// calls)". Not in JSON: Text says them.
	Calls        int64 `json:"-"`
	MinimumCalls int64 `json:"-"`
	// Text is the figure in words: "55% of 50%", "12.5% (no threshold)",
	// "not judged yet (1 of 20 calls)" (wording.Rate). The JSON API sets
	// it (wording.Worded); the rules here and the collector's views leave
	// it empty.
	Text string `json:"text"`
}

// shownRate is a judged rate against its threshold: numbers only, no
// allocation (the collector makes two for every instance line it
// rebuilds, thousands a second).
func shownRate(label string, value, threshold float64) ShownRate {
	return ShownRate{Label: label, Value: value, Threshold: threshold, Judged: true}
}

// windowRates are the failure and slow-call rates of a closed breaker's
// sliding window h; below its minimum calls neither is judged.
func windowRates(h protocol.Headroom) (failure, slow ShownRate) {
	if c := ClosenessOf(h); !c.Judged {
		return ShownRate{Label: "failure rate", Value: h.FailureRate, Threshold: h.FailureRateThreshold, Calls: c.Calls, MinimumCalls: c.MinimumCalls},
			ShownRate{Label: "slow-call rate", Value: h.SlowCallRate, Threshold: h.SlowCallRateThreshold, Calls: c.Calls, MinimumCalls: c.MinimumCalls}
	}
	return shownRate("failure rate", h.FailureRate, h.FailureRateThreshold),
		shownRate("slow-call rate", h.SlowCallRate, h.SlowCallRateThreshold)
}

// Tripped reports whether a state is one a breaker reaches by tripping:
// open or half-open (not an operator's forced open).
func Tripped(state string) bool {
	return state == protocol.StateOpen || state == protocol.StateHalfOpen
}

// RateTrip reports whether a cause is a trip by a rate (failure or slow
// call), the trips whose rates RatesOf shows.
func RateTrip(c protocol.Cause) bool {
	return c.Kind == protocol.CauseFailureRate || c.Kind == protocol.CauseSlowCallRate
}

// RatesOf gives the failure and slow-call rates shown for d:
//   - while closed (or forced closed, or no live instance): the sliding
//     window closest to opening (d.Headroom), "not judged yet" below the
//     minimum calls;
//   - open or half-open with a known trip: the rates of the window that
//     tripped it, against its thresholds ("tripped at 55% of 50%"), from
//     the first live tripped instance (PerInstance order) whose trip is
//     known: causes[instance] when causes has it, else its LastTrip,
//     else d.TripElsewhere;
//   - otherwise the last minute's rates (d.FailureRate, d.SlowCallRate).
//
// causes may be nil.
func RatesOf(d Dependency, causes map[string]protocol.Cause) (failure, slow ShownRate) {
	h := d.Headroom
	if c, ok := depTrip(d, causes); ok {
		switch c.Kind {
		case protocol.CauseFailureRate:
			return shownRate("failure rate, tripped at", c.FailureRate, c.Threshold), shownRate("slow-call rate, at trip", c.SlowCallRate, h.SlowCallRateThreshold)
		case protocol.CauseSlowCallRate:
			return shownRate("failure rate, at trip", c.FailureRate, h.FailureRateThreshold), shownRate("slow-call rate, tripped at", c.SlowCallRate, c.Threshold)
		}
	}
	if d.State == protocol.StateClosed || d.State == protocol.StateForcedClosed || d.State == "" {
		return windowRates(h)
	}
	return shownRate("failure rate, last min", d.FailureRate, h.FailureRateThreshold),
		shownRate("slow-call rate, last min", d.SlowCallRate, h.SlowCallRateThreshold)
}

func depTrip(d Dependency, causes map[string]protocol.Cause) (protocol.Cause, bool) {
	if !Tripped(d.State) {
		return protocol.Cause{}, false
	}
	for _, in := range d.PerInstance {
		if in.Stale || !Tripped(in.State) {
			continue
		}
		if c, ok := causes[in.Instance]; ok && RateTrip(c) {
			return c, true
		}
		if t := in.LastTrip; t != nil && RateTrip(t.Cause) {
			return t.Cause, true
		}
	}
	if c := d.TripElsewhere; c != nil && RateTrip(*c) {
		return *c, true
	}
	return protocol.Cause{}, false
}

// ShownRates are the failure and slow-call rates shown for a dependency
// or an instance (RatesOf, InstanceRatesOf).
type ShownRates struct {
	Failure ShownRate `json:"failure"`
	Slow    ShownRate `json:"slow"`
}

// InstanceRatesOf gives the rates shown for one instance's breaker: for a
// tripped one whose trip is known (cause, or else its LastTrip) the rates
// at the trip, otherwise its last window report's sliding window. cause
// may be nil.
func InstanceRatesOf(in InstanceBreaker, cause *protocol.Cause) (failure, slow ShownRate) {
	return LineRatesOf(&in, cause)
}

// LineRatesOf is InstanceRatesOf of *in, without copying the line.
func LineRatesOf(in *InstanceBreaker, cause *protocol.Cause) (failure, slow ShownRate) {
	var h protocol.Headroom // none without a window (Last nil: a line not from live state)
	if in.Last != nil {
		h = in.Last.Headroom
	}
	if Tripped(in.State) && !in.Stale {
		c := cause
		if c == nil && in.LastTrip != nil {
			c = &in.LastTrip.Cause
		}
		if c != nil {
			switch c.Kind {
			case protocol.CauseFailureRate:
				return shownRate("failure rate, tripped at", c.FailureRate, c.Threshold), shownRate("slow-call rate, at trip", c.SlowCallRate, h.SlowCallRateThreshold)
			case protocol.CauseSlowCallRate:
				return shownRate("failure rate, at trip", c.FailureRate, h.FailureRateThreshold), shownRate("slow-call rate, tripped at", c.SlowCallRate, c.Threshold)
			}
		}
	}
	return windowRates(h)
}
