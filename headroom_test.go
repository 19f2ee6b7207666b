package cbdash_test

import (
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestClosenessOf(t *testing.T) {
	tests := []struct {
		name   string
		h      protocol.Headroom
		ratio  float64
		rate   string
		judged bool
		score  float64
	}{
		{name: "one failed call of a minimum 20 is not judged and scores low",
			h:     protocol.Headroom{Calls: 1, Failures: 1, MinimumCalls: 20, FailureRate: 100, FailureRateThreshold: 50},
			ratio: 2, rate: "failure rate", judged: false, score: 0.1},
		{name: "a full window is judged at its ratio",
			h:     protocol.Headroom{Calls: 20, Failures: 8, MinimumCalls: 20, FailureRate: 40, FailureRateThreshold: 50},
			ratio: 0.8, rate: "failure rate", judged: true, score: 0.8},
		{name: "the slow-call rate wins when it is closer",
			h:     protocol.Headroom{Calls: 30, Slow: 27, MinimumCalls: 10, FailureRate: 10, FailureRateThreshold: 50, SlowCallRate: 90, SlowCallRateThreshold: 100},
			ratio: 0.9, rate: "slow-call rate", judged: true, score: 0.9},
		{name: "an empty window is not judged",
			h:     protocol.Headroom{MinimumCalls: 0, FailureRateThreshold: 50},
			ratio: 0, rate: "", judged: false, score: 0},
		{name: "no thresholds at all is never close",
			h:     protocol.Headroom{Calls: 100, Failures: 100, MinimumCalls: 10, FailureRate: 100},
			ratio: 0, rate: "", judged: true, score: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cbdash.ClosenessOf(tt.h)
			if c.Ratio != tt.ratio || c.Rate != tt.rate || c.Judged != tt.judged || c.Score != tt.score {
				t.Errorf("got %+v, want ratio %v rate %q judged %v score %v", c, tt.ratio, tt.rate, tt.judged, tt.score)
			}
		})
	}
}
