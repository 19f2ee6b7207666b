package cbdash_test

import (
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestRatesOfShowsTheWindowOrTheTrip(t *testing.T) {
	hr := protocol.Headroom{Calls: 40, MinimumCalls: 20, FailureRate: 12.5, FailureRateThreshold: 50, SlowCallRateThreshold: 80}
	tripped := &protocol.Transition{From: protocol.StateClosed, To: protocol.StateOpen,
		Cause: protocol.Cause{Kind: protocol.CauseSlowCallRate, FailureRate: 3, SlowCallRate: 85, Threshold: 80}}
	dep := func(state string, ins ...*cbdash.InstanceBreaker) cbdash.Dependency {
		return cbdash.Dependency{State: state, Headroom: hr, FailureRate: 7, PerInstance: ins}
	}
	for _, tc := range []struct {
		name       string
		d          cbdash.Dependency
		fail, slow string
	}{
		{"closed: the window", dep(protocol.StateClosed), "failure rate 12.5% of 50%", "slow-call rate 0% of 80%"},
		{"closed below the minimum: not judged", cbdash.Dependency{State: protocol.StateClosed, Headroom: protocol.Headroom{Calls: 1, Failures: 1, MinimumCalls: 20, FailureRate: 100, FailureRateThreshold: 50}},
			"failure rate not judged yet (1 of 20 calls)", "slow-call rate not judged yet (1 of 20 calls)"},
		{"open with a known trip: at the trip", dep(protocol.StateOpen, &cbdash.InstanceBreaker{Instance: "a", State: protocol.StateOpen, LastTrip: tripped}),
			"failure rate, at trip 3% of 50%", "slow-call rate, tripped at 85% of 80%"},
		{"open, trip unknown: the last minute", dep(protocol.StateOpen, &cbdash.InstanceBreaker{Instance: "a", State: protocol.StateOpen}),
			"failure rate, last min 7% of 50%", "slow-call rate, last min 0% of 80%"},
		{"a stale instance's trip does not explain it", dep(protocol.StateOpen, &cbdash.InstanceBreaker{Instance: "a", State: protocol.StateOpen, Stale: true, LastTrip: tripped}),
			"failure rate, last min 7% of 50%", "slow-call rate, last min 0% of 80%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, s := cbdash.RatesOf(tc.d, nil)
			if got := f.Label + " " + f.Text; got != tc.fail {
				t.Errorf("failure %q, want %q", got, tc.fail)
			}
			if got := s.Label + " " + s.Text; got != tc.slow {
				t.Errorf("slow %q, want %q", got, tc.slow)
			}
		})
	}
	f, _ := cbdash.InstanceRatesOf(cbdash.InstanceBreaker{State: protocol.StateHalfOpen, LastTrip: tripped, Last: &protocol.Window{Headroom: hr}}, nil)
	if got := f.CellText(); got != "at trip 3% of 50%" {
		t.Errorf("half-open instance cell %q, want its trip's", got)
	}
}

func TestTransitionRecordJSONGivesAtInBothForms(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).UTC()
	b, err := json.Marshal(cbdash.TransitionRecord{ID: 7, Service: "s", Instance: "i", ReceivedAt: at.Add(time.Second),
		Transition: protocol.Transition{Breaker: "b", From: protocol.StateClosed, To: protocol.StateOpen, At: at.UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["at"] != float64(at.UnixMilli()) || m["at_time"] != at.Format(time.RFC3339Nano) || m["id"] != float64(7) || m["breaker"] != "b" || m["received_at"] == nil {
		t.Fatalf("json %s", b)
	}
	var back cbdash.TransitionRecord
	if err := json.Unmarshal(b, &back); err != nil || back.At != at.UnixMilli() || back.ID != 7 || back.Breaker != "b" {
		t.Fatalf("round trip %+v: %v", back, err)
	}
}

// TestLineRatesAfterAreTheLinesRates: whatever line a line replaces, its
// rates are cbdash.LineRatesOf's; the same rate as before shares the previous
// text (no new one built), another gets its own.
func TestLineRatesAfterAreTheLinesRates(t *testing.T) {
	judged := protocol.Headroom{Calls: 100, Failures: 4, MinimumCalls: 20, FailureRate: 4, FailureRateThreshold: 50}
	moved := judged
	moved.FailureRate, moved.Failures = 6, 6
	early := protocol.Headroom{Calls: 3, MinimumCalls: 20, FailureRateThreshold: 50, SlowCallRateThreshold: 80}
	trip := &protocol.Transition{From: protocol.StateClosed, To: protocol.StateOpen,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50}}
	slowTrip := &protocol.Transition{From: protocol.StateClosed, To: protocol.StateOpen,
		Cause: protocol.Cause{Kind: protocol.CauseSlowCallRate, SlowCallRate: 90, Threshold: 80}}
	lines := map[string]*cbdash.InstanceBreaker{
		"closed":          {State: protocol.StateClosed, Last: &protocol.Window{Headroom: judged}},
		"closed, moved":   {State: protocol.StateClosed, Last: &protocol.Window{Headroom: moved}},
		"not judged":      {State: protocol.StateClosed, Last: &protocol.Window{Headroom: early}},
		"open":            {State: protocol.StateOpen, Last: &protocol.Window{Headroom: judged}, LastTrip: trip},
		"open, slow trip": {State: protocol.StateOpen, Last: &protocol.Window{Headroom: judged}, LastTrip: slowTrip},
		"stale open":      {State: protocol.StateOpen, Stale: true, Last: &protocol.Window{Headroom: judged}, LastTrip: trip},
		"no window":       {State: protocol.StateClosed},
	}
	for name, in := range lines {
		wantF, wantS := cbdash.LineRatesOf(in, nil)
		if f, s := cbdash.LineRatesAfter(in, nil); f != wantF || s != wantS {
			t.Errorf("%s after none: %+v %+v, want %+v %+v", name, f, s, wantF, wantS)
		}
		for prevName, prevLine := range lines {
			var prev cbdash.ShownRates
			prev.Failure, prev.Slow = cbdash.LineRatesOf(prevLine, nil)
			f, s := cbdash.LineRatesAfter(in, &prev)
			if f != wantF || s != wantS {
				t.Errorf("%s after %s: %+v %+v, want %+v %+v", name, prevName, f, s, wantF, wantS)
			}
			if name == prevName && wantF.Judged && unsafe.StringData(f.Text) != unsafe.StringData(prev.Failure.Text) {
				t.Errorf("%s after itself: the failure rate's text was built again", name)
			}
		}
	}
}
