package cbdash

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Quorum rules read as the flag writes them and write back with their
// defaults; bad ones are refused naming the input.
func TestQuorumRulesParseAndWriteBack(t *testing.T) {
	for in, want := range map[string]string{
		"checkout/*:q=50%,m=3,box=30s": "checkout/*:q=50%,m=3,box=30s",
		"checkout/payments":            "checkout/payments:q=50%,m=3",
		"*/payments:q=75":              "*/payments:q=75%,m=3",
		"checkout/payments:off":        "checkout/payments:off",
		"*/*:m=5,box=1m":               "*/*:q=50%,m=5,box=1m0s",
		"pay/db:probes=1,spread=20s":   "pay/db:q=50%,m=3,probes=1,spread=20s",
	} {
		r, err := ParseQuorumRule(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("%q reads back as %q, want %q", in, r.String(), want)
		}
	}
	for _, in := range []string{"", "checkout", "checkout/:q=5", "a/b/c", "a/b:q=120%", "a/b:m=-1", "a/b:box=-1s", "a/b:probes=-1", "a/b:probes=101", "a/b:spread=-2s", "a/b:k=1", "a/b:q=lots"} {
		if _, err := ParseQuorumRule(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err %v, want ErrInvalid", in, err)
		}
	}
}

// The first rule that matches a dependency decides, so an "off" rule
// ahead of a broader one switches one dependency off.
func TestTheFirstMatchingQuorumRuleDecides(t *testing.T) {
	var rules []QuorumRule
	for _, s := range []string{"checkout/legacy:off", "checkout/*:q=60%", "*/payments"} {
		r, err := ParseQuorumRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	for _, c := range []struct {
		k    DependencyKey
		on   bool
		rule string
	}{
		{DependencyKey{Service: "checkout", Breaker: "legacy"}, false, ""},
		{DependencyKey{Service: "checkout", Breaker: "payments"}, true, "checkout/*:q=60%,m=3"},
		{DependencyKey{Service: "cart", Breaker: "payments"}, true, "*/payments:q=50%,m=3"},
		{DependencyKey{Service: "cart", Breaker: "stock"}, false, ""},
	} {
		r, ok := QuorumRuleFor(rules, c.k)
		if ok != c.on || (ok && r.String() != c.rule) {
			t.Errorf("%v: on %v rule %q, want on %v rule %q", c.k, ok, r.String(), c.on, c.rule)
		}
	}
}

// fleetLines is n instances of one dependency, the first open of them
// open on their own, and the rest closed with calls over their minimum
// and a failure rate of rate percent (threshold 50).
func fleetLines(n, open int, rate float64) []*InstanceBreaker {
	var out []*InstanceBreaker
	for i := range n {
		ib := &InstanceBreaker{Service: "checkout", Instance: fmt.Sprintf("i%02d", i), Breaker: "payments", State: protocol.StateClosed,
			Config: &protocol.BreakerConfig{OpenDurationMillis: 5000},
			Last:   &protocol.Window{Headroom: protocol.Headroom{Calls: 20, MinimumCalls: 10, FailureRate: rate, FailureRateThreshold: 50}}}
		if i < open {
			ib.State = protocol.StateOpen
		}
		out = append(out, ib)
	}
	return out
}

// A quorum needs both the share and the count: one instance of twenty
// with a bad path never makes one, whatever the rule's share.
func TestAQuorumIsNeverAMinority(t *testing.T) {
	rule := QuorumRule{Service: "*", Breaker: "*", Percent: 50, Min: 3}
	for _, c := range []struct {
		name        string
		lines       []*InstanceBreaker
		met         bool
		tripped, of int
	}{
		{"one of twenty open", fleetLines(20, 1, 0), false, 1, 20},
		{"two of three open: under m", fleetLines(3, 2, 0), false, 2, 3},
		{"nine of twenty open", fleetLines(20, 9, 0), false, 9, 20},
		{"ten of twenty open", fleetLines(20, 10, 0), true, 10, 20},
		{"every closed one over threshold", fleetLines(4, 0, 60), true, 4, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := QuorumOf(c.lines)
			if q.Met(rule) != c.met || q.Tripped() != c.tripped || q.Eligible != c.of {
				t.Errorf("met %v, %d of %d; want %v, %d of %d", q.Met(rule), q.Tripped(), q.Eligible, c.met, c.tripped, c.of)
			}
		})
	}
	if q := QuorumOf(fleetLines(20, 20, 0)); q.Met(QuorumRule{Off: true}) {
		t.Error("an off rule is met")
	}
}

// Stale and forced instances count nowhere; closed ones under their
// minimum calls are not eligible but are advised; the box is the rule's,
// else the tripped breakers' open duration.
func TestAQuorumCountsOnlyTheInstancesThatJudgedOnTheirOwn(t *testing.T) {
	lines := fleetLines(6, 3, 0)
	lines[3].State = protocol.StateForcedOpen
	lines[4].Stale = true
	lines[5].Last = &protocol.Window{Headroom: protocol.Headroom{Calls: 2, MinimumCalls: 10}}
	q := QuorumOf(lines)
	if q.Eligible != 3 || q.Tripped() != 3 || strings.Join(q.Closed, ",") != "i05" {
		t.Errorf("eligible %d tripped %d closed %v; want 3, 3, [i05]", q.Eligible, q.Tripped(), q.Closed)
	}
	if got := q.Box(QuorumRule{}, 0); got != 5*time.Second {
		t.Errorf("box %v, want the open duration 5s", got)
	}
	if got := q.Box(QuorumRule{Box: 2 * time.Second}, 0); got != 2*time.Second {
		t.Errorf("box %v, want the rule's 2s", got)
	}
	if got := (Quorum{}).Box(QuorumRule{}, time.Second*10); got != 10*time.Second {
		t.Errorf("box %v, want the default capped at the maximum hold", got)
	}
	want := "quorum: 3 of 3 instances at minimum calls tripped on their own (100 % >= 50 %, at least 3: i00, i01, i02) under rule */*:q=50%,m=3; open for 5s or until one of them closes"
	if got := q.Reason(QuorumRule{Service: "*", Breaker: "*"}, 5*time.Second); got != want {
		t.Errorf("reason\n%s\nwant\n%s", got, want)
	}
}
