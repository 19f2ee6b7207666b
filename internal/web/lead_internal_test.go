package web

import (
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

func TestATileLeadsWithTheRateThatTrippedIt(t *testing.T) {
	t.Parallel()
	trip := &protocol.Transition{From: protocol.StateClosed, To: protocol.StateOpen,
		Cause: protocol.Cause{Kind: protocol.CauseSlowCallRate, FailureRate: 0, SlowCallRate: 60, Threshold: 50}}
	d := cbdash.Dependency{State: protocol.StateOpen, Instances: 1, ByState: map[string]int{protocol.StateOpen: 1},
		Headroom:    protocol.Headroom{FailureRateThreshold: 50, SlowCallRateThreshold: 50},
		PerInstance: []*cbdash.InstanceBreaker{{Instance: "a", State: protocol.StateOpen, LastTrip: trip}}}
	tl := tile(d, templates.Spark{}, nil, clocktest.Epoch())
	if !tl.SlowLeads || tl.Slow.Big != "60%" {
		t.Fatalf("slow-call trip: leads %v with %+v", tl.SlowLeads, tl.Slow)
	}
	trip.Cause.Kind, trip.Cause.FailureRate = protocol.CauseFailureRate, 70
	if tl := tile(d, templates.Spark{}, nil, clocktest.Epoch()); tl.SlowLeads {
		t.Fatal("a failure-rate trip leads with the slow-call rate")
	}
}
