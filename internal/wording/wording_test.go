package wording_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestRatesOfShowsTheWindowOrTheTrip: the rates of cbdash.RatesOf (the
// rule) in the words the tile, the CLI and the JSON API give them.
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
			if got := f.Label + " " + wording.Rate(f); got != tc.fail {
				t.Errorf("failure %q, want %q", got, tc.fail)
			}
			if got := s.Label + " " + wording.Rate(s); got != tc.slow {
				t.Errorf("slow %q, want %q", got, tc.slow)
			}
		})
	}
	f, _ := cbdash.InstanceRatesOf(cbdash.InstanceBreaker{State: protocol.StateHalfOpen, LastTrip: tripped, Last: &protocol.Window{Headroom: hr}}, nil)
	if got := wording.RateCell(f); got != "at trip 3% of 50%" {
		t.Errorf("half-open instance cell %q, want its trip's", got)
	}
}

// AppendPct's whole-number path writes what AppendFloat(v, 'f', 0) does.
func TestPctOfWholeNumbersIsAppendFloats(t *testing.T) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, 50, 100, 99999, 1e14, 1e15 - 1, 1e15, 1e300, -3, math.Inf(1), math.NaN(), 12.5, 0.05, 0.15} {
		prec := 1
		if v == math.Trunc(v) {
			prec = 0
		}
		want := strconv.FormatFloat(v, 'f', prec, 64) + "%"
		if got := wording.Pct(v); got != want {
			t.Errorf("Pct(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestNotJudgedSaysTheCallsAgainstTheMinimum(t *testing.T) {
	for _, tc := range []struct {
		h    protocol.Headroom
		want string
	}{
		{protocol.Headroom{Calls: 1, Failures: 1, MinimumCalls: 20, FailureRate: 100, FailureRateThreshold: 50}, "1 of 20 calls"},
		{protocol.Headroom{MinimumCalls: 0, FailureRateThreshold: 50}, "no calls"},
	} {
		if c := cbdash.ClosenessOf(tc.h); c.Judged || wording.NotJudged(c.Calls, c.MinimumCalls) != tc.want {
			t.Errorf("%+v: judged %v, %q, want not judged, %q", tc.h, c.Judged, wording.NotJudged(c.Calls, c.MinimumCalls), tc.want)
		}
	}
}

func TestSpanStateAndLatencyWords(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 45*time.Second + 900*time.Millisecond: "45s",
		3*time.Minute + 12*time.Second: "3m12s", 2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d4h"} {
		if got := wording.Span(d); got != want {
			t.Errorf("Span(%v) = %q, want %q", d, got, want)
		}
	}
	for s, want := range map[string]string{protocol.StateClosed: "closed", protocol.StateHalfOpen: "half-open",
		protocol.StateForcedOpen: "forced open", protocol.StateForcedClosed: "forced closed", "": "no live instance"} {
		if got := wording.State(s); got != want {
			t.Errorf("State(%q) = %q, want %q", s, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "–", 850 * time.Microsecond: "850 µs", 120 * time.Millisecond: "120 ms", 1250 * time.Millisecond: "1.25 s"} {
		if got := wording.Latency(d); got != want {
			t.Errorf("Latency(%v) = %q, want %q", d, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0/s", 2.5: "2.50/s", 12.5: "12.5/s", 1234: "1.2k/s"} {
		if got := wording.PerSecond(v); got != want {
			t.Errorf("PerSecond(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestWordedSetsTheTextsInCopies: the JSON API's words for a dependency
// and its lines, the collector's shared lines left without.
func TestWordedSetsTheTextsInCopies(t *testing.T) {
	line := &cbdash.InstanceBreaker{Instance: "a", State: protocol.StateClosed,
		Last: &protocol.Window{Headroom: protocol.Headroom{Calls: 3, MinimumCalls: 20, FailureRateThreshold: 50}}}
	line.Shown.Failure, line.Shown.Slow = cbdash.LineRatesOf(line, nil)
	d := cbdash.Dependency{State: protocol.StateClosed, Headroom: protocol.Headroom{Calls: 40, MinimumCalls: 20, FailureRate: 12.5, FailureRateThreshold: 50},
		PerInstance: []*cbdash.InstanceBreaker{line}}
	d.Shown.Failure, d.Shown.Slow = cbdash.RatesOf(d, nil)
	w := wording.Worded(d)
	if w.Shown.Failure.Text != "12.5% of 50%" || w.Shown.Slow.Text != "0% (no threshold)" {
		t.Errorf("dependency rates %+v", w.Shown)
	}
	if got := w.PerInstance[0].Shown.Failure.Text; got != "not judged yet (3 of 20 calls)" {
		t.Errorf("line's failure rate %q", got)
	}
	if line.Shown.Failure.Text != "" || d.Shown.Failure.Text != "" || w.PerInstance[0] == line {
		t.Error("Worded changed the shared line or the dependency it was given")
	}
	if got := wording.Rate(cbdash.ShownRate{}); got != "" {
		t.Errorf("a rate never computed is %q, want \"\"", got)
	}
}

// TestWordedSaysARateOnAnotherCollector: the rates of a line served by
// another collector (no window here) are "on another collector", not
// "not judged yet (no calls)"; a rate at a known trip keeps its figure.
func TestWordedSaysARateOnAnotherCollector(t *testing.T) {
	closed := &cbdash.InstanceBreaker{Instance: "b", State: protocol.StateClosed, Elsewhere: true, Last: &protocol.Window{}}
	closed.Shown.Failure, closed.Shown.Slow = cbdash.LineRatesOf(closed, nil)
	open := &cbdash.InstanceBreaker{Instance: "c", State: protocol.StateOpen, Elsewhere: true, Last: &protocol.Window{},
		LastTrip: &protocol.Transition{Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50}}}
	open.Shown.Failure, open.Shown.Slow = cbdash.LineRatesOf(open, nil)
	w := wording.Worded(cbdash.Dependency{State: protocol.StateOpen, PerInstance: []*cbdash.InstanceBreaker{closed, open}})
	if f, s := w.PerInstance[0].Shown.Failure.Text, w.PerInstance[0].Shown.Slow.Text; f != wording.Elsewhere || s != wording.Elsewhere {
		t.Errorf("a closed line on another collector says %q and %q, want %q", f, s, wording.Elsewhere)
	}
	if f := w.PerInstance[1].Shown.Failure.Text; f != "55% of 50%" {
		t.Errorf("a tripped line on another collector says %q, want its rate at the trip", f)
	}
}

// A dependency with an instance that stands for a cluster's hosts (a
// Turbine stream) is said in hosts: "open on 1 of 2 hosts", not "open on
// 1 of 1"; without one, in instances as before.
func TestInstancesCountsAClustersHosts(t *testing.T) {
	line := func(state string, hosts *protocol.Hosts) *cbdash.InstanceBreaker {
		return &cbdash.InstanceBreaker{State: state, Last: &protocol.Window{State: state, Hosts: hosts}}
	}
	for _, tc := range []struct {
		name string
		d    cbdash.Dependency
		want string
	}{
		{"a cluster open on one of its hosts", cbdash.Dependency{State: protocol.StateOpen, Instances: 1, ByState: map[string]int{protocol.StateOpen: 1},
			PerInstance: []*cbdash.InstanceBreaker{line(protocol.StateOpen, &protocol.Hosts{Total: 2, Open: 1})}}, "open on 1 of 2 hosts"},
		{"a closed cluster", cbdash.Dependency{State: protocol.StateClosed, Instances: 1, ByState: map[string]int{protocol.StateClosed: 1},
			PerInstance: []*cbdash.InstanceBreaker{line(protocol.StateClosed, &protocol.Hosts{Total: 3})}}, "closed on 3 of 3 hosts"},
		{"a cluster beside an instance of its own", cbdash.Dependency{State: protocol.StateOpen, Instances: 2, ByState: map[string]int{protocol.StateOpen: 2},
			PerInstance: []*cbdash.InstanceBreaker{line(protocol.StateOpen, &protocol.Hosts{Total: 4, Open: 2}), line(protocol.StateOpen, nil)}}, "open on 3 of 5 hosts"},
		{"a cluster here and two instances served by another collector", cbdash.Dependency{State: protocol.StateOpen, Instances: 3,
			ByState:     map[string]int{protocol.StateOpen: 2, protocol.StateClosed: 1},
			PerInstance: []*cbdash.InstanceBreaker{line(protocol.StateOpen, &protocol.Hosts{Total: 4, Open: 2})}}, "open on 3 of 6 hosts"},
		{"instances alone", cbdash.Dependency{State: protocol.StateOpen, Instances: 6, ByState: map[string]int{protocol.StateOpen: 2},
			PerInstance: []*cbdash.InstanceBreaker{line(protocol.StateOpen, nil), line(protocol.StateOpen, nil)}}, "open on 2 of 6"},
	} {
		if got := wording.Instances(tc.d); got != tc.want {
			t.Errorf("%s: Instances = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := wording.Hosts(&protocol.Hosts{Total: 2, Open: 1}); got != "cluster of 2 hosts, 1 open" {
		t.Errorf("Hosts = %q", got)
	}
}
