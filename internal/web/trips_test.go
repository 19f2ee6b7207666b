package web

import (
	"context"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestOpenBreakerShowsTheRateThatTrippedIt(t *testing.T) {
	t.Parallel()
	hr := protocol.Headroom{Calls: 30, MinimumCalls: 10, FailureRate: 0, FailureRateThreshold: 50, SlowCallRateThreshold: 80}
	d := cbdash.Dependency{
		DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		State:         protocol.StateOpen, Instances: 2, FailureRate: 2.2,
		Headroom: hr,
		PerInstance: []*cbdash.InstanceBreaker{
			{Instance: "checkout-1", State: protocol.StateClosed, Config: &protocol.BreakerConfig{}, Last: &protocol.Window{Headroom: hr}},
			{Instance: "checkout-2", State: protocol.StateOpen, Config: &protocol.BreakerConfig{}, Last: &protocol.Window{Headroom: hr}},
		},
	}
	trip := func(inst, from, to string, c protocol.Cause) cbdash.TransitionRecord {
		return cbdash.TransitionRecord{Instance: inst, Transition: protocol.Transition{From: from, To: to, Cause: c}}
	}
	recs := []cbdash.TransitionRecord{ // newest first
		trip("checkout-2", protocol.StateClosed, protocol.StateOpen, protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 52, SlowCallRate: 10, Threshold: 50}),
		trip("checkout-2", protocol.StateHalfOpen, protocol.StateClosed, protocol.Cause{Kind: protocol.CauseProbesSucceeded}),
		trip("checkout-2", protocol.StateClosed, protocol.StateOpen, protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 90, Threshold: 50}),
		trip("checkout-1", protocol.StateClosed, protocol.StateOpen, protocol.Cause{Kind: protocol.CauseSlowCallRate, SlowCallRate: 85, Threshold: 80}),
	}
	causes := tripCauses(recs)
	if got := causes["checkout-2"].FailureRate; got != 52 {
		t.Fatalf("checkout-2 trip failure rate = %v, want the newest trip's 52", got)
	}
	f, s := rates(d, causes)
	if f.Label != "failure rate, tripped at" || f.Text != "52% of 50%" || f.Level != "bad" || f.Fill != 100 {
		t.Fatalf("header failure = %+v, want tripped at 52%% of 50%%, full bar", f)
	}
	if s.Label != "slow-call rate, at trip" || s.Text != "10% of 80%" {
		t.Fatalf("header slow = %+v", s)
	}
	rows := instanceRows(d, causes, d.LastChange)
	if rows[1].Failure != "tripped at 52% of 50%" || rows[1].Slow != "at trip 10% of 80%" {
		t.Fatalf("open instance row = %q / %q, want the trip's rates like the header", rows[1].Failure, rows[1].Slow)
	}
	if rows[0].Failure != "0% of 50%" { // a window below its minimum calls would say "not judged yet"
		t.Fatalf("closed instance row = %q, want its window", rows[0].Failure)
	}
	// Without a known trip an open breaker keeps the last minute, labelled so.
	if f, _ := rates(d, nil); f.Label != "failure rate, last min" || f.Text != "2.2% of 50%" {
		t.Fatalf("open without trip = %+v", f)
	}
	// A closed breaker shows its window, whatever old trips there were.
	d.State = protocol.StateClosed
	if f, _ := rates(d, causes); f.Label != "failure rate" {
		t.Fatalf("closed = %+v, want the window", f)
	}
}

func TestTripsComeFromLiveStateWithoutAStoreQuery(t *testing.T) {
	t.Parallel()
	d := cbdash.Dependency{
		DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		State:         protocol.StateOpen,
		PerInstance: []*cbdash.InstanceBreaker{
			{Instance: "checkout-1", State: protocol.StateClosed},
			{Instance: "checkout-2", State: protocol.StateOpen, LastTrip: &protocol.Transition{
				From: protocol.StateClosed, To: protocol.StateOpen,
				Cause: protocol.Cause{Kind: protocol.CauseSlowCallRate, SlowCallRate: 85, Threshold: 80}}},
		},
	}
	s := &Server{} // no store: a query would panic
	got := s.trips(context.Background(), []cbdash.Dependency{d})[d.DependencyKey]
	if c, ok := got["checkout-2"]; !ok || c.SlowCallRate != 85 {
		t.Fatalf("trips = %+v, want checkout-2's live trip at 85%%", got)
	}
}
