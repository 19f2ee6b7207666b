package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Quorum-advised trips end to end: a real collector on loopback, real
// agents with real sdk/breaker breakers (minimum calls 10, threshold 50 %),
// on a running clock. The test waits on the collector's state and the
// breakers' own, never on time.

var errDown = errors.New("dependency down")

// quorumFleet is n instances of service checkout, each with the named
// breakers, their windows warmed to the minimum calls with successes and
// seen so by the collector.
type quorumFleet struct {
	t       *testing.T
	h       *harness
	members []*holdMember
}

func startQuorumFleet(t *testing.T, h *harness, clk *clocktest.Running, n int, open time.Duration, names ...string) *quorumFleet {
	t.Helper()
	f := &quorumFleet{t: t, h: h}
	for i := range n {
		ag, err := agent.New(agent.Config{URL: h.wsURL(), Token: h.token, Service: "checkout", Instance: fmt.Sprintf("i%d", i), Clock: clk,
			ReportInterval: 50 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		m := &holdMember{ag: ag, breakers: make(map[string]*breaker.Breaker)}
		for _, name := range names {
			br, err := breaker.New(name, breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: open, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			if err := ag.Register(br); err != nil {
				t.Fatal(err)
			}
			m.breakers[name] = br
		}
		if err := ag.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.close(t) })
		f.members = append(f.members, m)
	}
	for _, name := range names {
		for _, m := range f.members {
			for range 10 {
				_ = m.breakers[name].Execute(context.Background(), func(context.Context) error { return nil })
			}
		}
		f.seen(name, func(d cbdash.Dependency) bool {
			q := cbdash.QuorumOf(d.PerInstance)
			return d.Instances == n && q.Eligible == n && len(q.Closed) == n
		})
	}
	return f
}

// seen waits until the collector's view of dependency checkout/name
// satisfies cond.
func (f *quorumFleet) seen(name string, cond func(cbdash.Dependency) bool) {
	f.t.Helper()
	eventually.True(f.t, "checkout/"+name+" as expected", func() bool {
		d, err := f.h.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: name})
		return err == nil && cond(d)
	})
}

// trip fails calls of breaker name on the given instances until each has
// opened on its own, then waits until the collector has seen them open.
func (f *quorumFleet) trip(name string, instances ...int) {
	f.t.Helper()
	for _, i := range instances {
		br := f.members[i].breakers[name]
		for br.State() == breaker.Closed {
			_ = br.Execute(context.Background(), func(context.Context) error { return errDown })
		}
	}
	f.seen(name, func(d cbdash.Dependency) bool { return d.ByState[protocol.StateOpen] >= len(instances) })
}

// states is the state of breaker name on each instance.
func (f *quorumFleet) states(name string) []breaker.State {
	var out []breaker.State
	for _, m := range f.members {
		out = append(out, m.state(name))
	}
	return out
}

// advisories is the quorum's holds on checkout/name, newest first.
func (f *quorumFleet) advisories(name string) []cbdash.HoldRecord {
	f.t.Helper()
	hs, err := f.h.col.Holds(context.Background(), false, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []cbdash.HoldRecord
	for _, h := range hs {
		if h.Actor == cbdash.QuorumActor && h.Selector.Breaker == name {
			out = append(out, h)
		}
	}
	return out
}

// transitions is what the store holds of breaker name on instance inst.
func (f *quorumFleet) transitions(name, inst string) []cbdash.TransitionRecord {
	f.t.Helper()
	ts, err := f.h.store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "checkout", Breaker: name, Instance: inst})
	if err != nil {
		f.t.Fatal(err)
	}
	return ts
}

// hasTransition waits until inst's breaker name has a stored transition
// to state to of cause kind, and returns it.
func (f *quorumFleet) hasTransition(name, inst, to, kind string) cbdash.TransitionRecord {
	f.t.Helper()
	var got cbdash.TransitionRecord
	eventually.True(f.t, fmt.Sprintf("%s %s: a transition to %s (%s)", inst, name, to, kind), func() bool {
		for _, tr := range f.transitions(name, inst) {
			if tr.To == to && tr.Cause.Kind == kind {
				got = tr
				return true
			}
		}
		return false
	})
	return got
}

func quorumRules(t *testing.T, rules ...string) []cbdash.QuorumRule {
	t.Helper()
	var out []cbdash.QuorumRule
	for _, s := range rules {
		r, err := cbdash.ParseQuorumRule(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A dependency failing for every instance: once three of six have opened
// on their own (50 %, m=3), the other three are advised and open, with
// cause quorum and the figures; the advisory ends at the quorum's first
// close (one of the three probes successfully).
func TestAQuorumOpensTheRestOfTheFleetUntilItsFirstClose(t *testing.T) {
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk; c.Quorum = quorumRules(t, "checkout/*:q=50%,m=3,box=1m") })
	f := startQuorumFleet(t, h, clk, 6, 300*time.Millisecond, "payments")
	f.trip("payments", 0, 1, 2)

	eventually.True(t, "the three others forced open", func() bool {
		return slices.Equal(f.states("payments")[3:], []breaker.State{breaker.ForcedOpen, breaker.ForcedOpen, breaker.ForcedOpen})
	})
	for i, s := range f.states("payments")[:3] {
		if s == breaker.ForcedOpen || s == breaker.ForcedClosed {
			t.Errorf("i%d, which tripped on its own, is %v: an advisory goes only to those that did not", i, s)
		}
	}
	adv := f.advisories("payments")
	if len(adv) != 1 {
		t.Fatalf("%d advisories, want 1", len(adv))
	}
	a := adv[0]
	if got := strings.Join(a.Selector.Instances, ","); got != "i3,i4,i5" || a.TTL != time.Minute || len(a.Stops) != 0 {
		t.Errorf("advisory to %q for %v with stops %v; want i3,i4,i5 for the box, 1m, none", got, a.TTL, a.Stops)
	}
	if !strings.HasPrefix(a.Reason, "quorum: 3 of 6 instances at minimum calls tripped on their own (50 % >= 50 %, at least 3: i0, i1, i2) under rule checkout/*:q=50%,m=3,box=1m0s") {
		t.Errorf("reason %q: want the rule and the figures", a.Reason)
	}
	tr := f.hasTransition("payments", "i4", protocol.StateForcedOpen, protocol.CauseQuorum)
	// The agent counts the TTL from when it applied the command.
	if exp := time.UnixMilli(tr.Cause.ExpiresAt); tr.Cause.Actor != cbdash.QuorumActor || tr.Cause.Reason != a.Reason || exp.Before(a.Until) || exp.After(a.Until.Add(time.Second)) {
		t.Errorf("i4's transition cause %+v: want the quorum's actor, reason and an expiry within a second after %v", tr.Cause, a.Until)
	}

	// i0's probe succeeds: the quorum's first close ends the advisory.
	eventually.True(t, "i0 closed by a successful probe", func() bool {
		_ = f.members[0].breakers["payments"].Execute(context.Background(), func(context.Context) error { return nil })
		return f.members[0].state("payments") == breaker.Closed
	})
	eventually.True(t, "the advised ones closed again", func() bool {
		return slices.Equal(f.states("payments")[3:], []breaker.State{breaker.Closed, breaker.Closed, breaker.Closed})
	})
	adv = f.advisories("payments")
	if n := len(adv); n != 3 || adv[n-1].ReleasedBy != cbdash.QuorumActor || adv[n-1].ReleaseReason != "quorum's first close: checkout/i0 closed again" {
		t.Fatalf("advisories %+v: want the one released at the first close and the two waves of the staggered return", adv)
	}
	// The return is staggered over the open duration (300 ms): i3 with the
	// release, i4 and i5 in waves held 100 and 200 ms by advisories that
	// end by themselves.
	for i, want := range []string{"i5 for 200ms", "i4 for 100ms"} {
		w := adv[i]
		if got := strings.Join(w.Selector.Instances, ",") + " for " + w.TTL.String(); got != want ||
			!strings.HasPrefix(w.Reason, "quorum's first close, staggered return: ") || !w.ReleasedAt.IsZero() {
			t.Errorf("wave %+v, want %s ending by itself", w, want)
		}
	}
	f.hasTransition("payments", "i3", protocol.StateClosed, protocol.CauseQuorum)
	f.hasTransition("payments", "i4", protocol.StateClosed, protocol.CauseExpired)
}

// A fault seen by one instance of twenty trips only that one; a rule's
// "off" keeps a dependency out even when its quorum is met. (The
// advisory on checkout/stock, tripped after both were seen, proves that
// the checks that followed found nothing to do on them.)
func TestOneInstanceWithABadPathTripsOnlyItself(t *testing.T) {
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) {
		c.Clock = clk
		c.Quorum = quorumRules(t, "checkout/legacy:off", "checkout/*:q=30%,m=3,box=1m")
	})
	f := startQuorumFleet(t, h, clk, 20, time.Minute, "payments", "legacy", "stock")
	f.trip("payments", 5)
	f.trip("legacy", 0, 1, 2, 3, 4, 5)
	f.trip("stock", 0, 1, 2, 3, 4, 5)
	eventually.True(t, "stock advised to the fourteen others", func() bool {
		return slices.Equal(f.states("stock")[6:], slices.Repeat([]breaker.State{breaker.ForcedOpen}, 14))
	})
	for _, name := range []string{"payments", "legacy"} {
		if adv := f.advisories(name); len(adv) != 0 {
			t.Errorf("%s: %d advisories, want none", name, len(adv))
		}
		for i, s := range f.states(name) {
			if s == breaker.ForcedOpen {
				t.Errorf("%s on i%d is forced open", name, i)
			}
		}
	}
	if s := f.states("payments"); slices.Index(s, breaker.Open) != 5 || slices.Index(s[6:], breaker.Open) != -1 || slices.Index(s[:5], breaker.Open) != -1 {
		t.Errorf("payments states %v: want only i5 open", s)
	}
}

// An advisory ends by itself at its time box (the agents end the forced
// state, cause expired); while the quorum is still met, the next check
// advises again, under a new hold.
func TestAQuorumAdvisoryEndsAtItsTimeBox(t *testing.T) {
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk; c.Quorum = quorumRules(t, "checkout/payments:q=50%,m=3,box=1s") })
	f := startQuorumFleet(t, h, clk, 4, time.Minute, "payments")
	f.trip("payments", 0, 1, 2)
	eventually.True(t, "i3 advised", func() bool { return f.members[3].state("payments") == breaker.ForcedOpen })
	first := f.advisories("payments")[0]
	exp := f.hasTransition("payments", "i3", protocol.StateClosed, protocol.CauseExpired)
	if at := time.UnixMilli(exp.At); at.Before(first.Until.Add(-50*time.Millisecond)) || !first.ReleasedAt.IsZero() {
		t.Errorf("i3 closed at %v, advisory until %v, released %v: want the box to end it", at, first.Until, first.ReleasedAt)
	}
	eventually.True(t, "a second advisory", func() bool { return len(f.advisories("payments")) == 2 })
	if second := f.advisories("payments")[0]; second.ID == first.ID || second.CreatedAt.Before(first.Until) {
		t.Errorf("second advisory %s at %v; want a new one after %v", second.ID, second.CreatedAt, first.Until)
	}
}

// Off by default: a collector given no rule has no advisor, and a
// dependency whose quorum would be met gets no advisory.
func TestQuorumAdvisoriesAreOffByDefault(t *testing.T) {
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	if h.col.quorum != nil {
		t.Fatal("an advisor without rules")
	}
	f := startQuorumFleet(t, h, clk, 4, time.Minute, "payments")
	f.trip("payments", 0, 1, 2)
	if adv := f.advisories("payments"); len(adv) != 0 {
		t.Errorf("%d advisories, want none", len(adv))
	}
	if s := f.members[3].state("payments"); s != breaker.Closed {
		t.Errorf("i3 is %v, want closed", s)
	}
}

// A rule given in code is checked as the flag's are.
func TestABadQuorumRuleIsRefusedAtNew(t *testing.T) {
	_, err := New(Config{Store: storetest.Open(t, clocktest.Virtual()), Quorum: []cbdash.QuorumRule{{Service: "checkout", Breaker: "*", Percent: 150}}})
	if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "Config.Quorum") {
		t.Errorf("err %v, want ErrInvalid naming Config.Quorum", err)
	}
}
