package cbdash

import "github.com/cbdash/cbdash/sdk/protocol"

// Closeness is how near a breaker's sliding window is to opening: the one
// definition used by the overview's tiles and order, the collector's
// choice of a dependency's headroom, the headroom alert and the JSON API.
//
// A closed breaker opens when, with at least the minimum number of calls in
// its sliding window, its failure rate or slow-call rate reaches its
// threshold (as in resilience4j's failureRateThreshold and
// slowCallRateThreshold). Below the minimum the rates are not judged: the
// breaker cannot open however high they are, so a single failed call of a
// minimum 20 is "1 of 20 calls", not "100% of 50%".
type Closeness struct {
	// Ratio is the higher of failure rate / its threshold and slow-call
	// rate / its threshold (0 when no threshold is set); 1 or more means
	// at or past a threshold.
	Ratio float64 `json:"ratio"`
	// Rate names the rate that gives Ratio: "failure rate" or
	// "slow-call rate"; "" when Ratio is 0.
	Rate string `json:"rate,omitempty"`
	// Judged is false while the window holds fewer calls than the minimum
	// number of calls (or none at all): the breaker does not apply its
	// thresholds yet.
	Judged bool `json:"judged"`
	// Calls and MinimumCalls are the window's recorded calls and the
	// minimum it needs before it is judged.
	Calls        int64 `json:"calls"`
	MinimumCalls int64 `json:"minimum_calls"`
	// Score orders windows by how close they are to opening: Ratio, scaled
	// by Calls/MinimumCalls while not judged (a window must both fill and
	// fail to open).
	Score float64 `json:"score"`
}

// ClosenessOf computes how close the sliding window h is to opening.
func ClosenessOf(h protocol.Headroom) Closeness {
	c := Closeness{Calls: h.Calls, MinimumCalls: h.MinimumCalls}
	if h.FailureRateThreshold > 0 {
		c.Ratio, c.Rate = h.FailureRate/h.FailureRateThreshold, "failure rate"
	}
	if h.SlowCallRateThreshold > 0 {
		if r := h.SlowCallRate / h.SlowCallRateThreshold; r > c.Ratio {
			c.Ratio, c.Rate = r, "slow-call rate"
		}
	}
	if c.Ratio == 0 {
		c.Rate = ""
	}
	c.Judged = h.Calls > 0 && h.Calls >= h.MinimumCalls
	c.Score = c.Ratio
	if !c.Judged {
		if h.MinimumCalls > 0 {
			c.Score *= float64(h.Calls) / float64(h.MinimumCalls)
		} else {
			c.Score = 0
		}
	}
	return c
}
