package collector

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// holdMember is a real agent process with real breakers, all on one
// running clock shared with the collector.
type holdMember struct {
	ag       *agent.Agent
	breakers map[string]*breaker.Breaker
	closed   bool
}

func startHoldMember(t *testing.T, h *harness, clk *clocktest.Running, service, instance string, labels map[string]string, names ...string) *holdMember {
	t.Helper()
	return startHoldMemberOn(t, []string{h.wsURL()}, h.token, clk, service, instance, labels, names...)
}

// startHoldMemberOn is startHoldMember with the agent given urls (several
// collectors: it fails over from one to the next) and token.
func startHoldMemberOn(t *testing.T, urls []string, token string, clk *clocktest.Running, service, instance string, labels map[string]string, names ...string) *holdMember {
	t.Helper()
	ag, err := agent.New(agent.Config{
		URLs: urls, Token: token, Service: service, Instance: instance, Labels: labels, Clock: clk,
		ReportInterval: 50 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &holdMember{ag: ag, breakers: make(map[string]*breaker.Breaker)}
	for _, n := range names {
		br, err := breaker.New(n, breaker.Config{MinimumCalls: 1000, FailureRateThreshold: 50, OpenDuration: time.Minute, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		if err := ag.Register(br); err != nil {
			t.Fatal(err)
		}
		m.breakers[n] = br
	}
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.close(t) })
	return m
}

func (m *holdMember) close(t *testing.T) {
	if m.closed {
		return
	}
	m.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.ag.Close(ctx); err != nil && !errors.Is(err, agent.ErrClosed) {
		t.Errorf("agent close: %v", err)
	}
}

func (m *holdMember) state(name string) breaker.State { return m.breakers[name].State() }

// drive makes calls whose outcome is known: while forced open every one is
// rejected, n with a fallback that serves and f with one that fails.
func (m *holdMember) drive(name string, n, f int) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	for range n {
		_ = m.breakers[name].ExecuteWithFallback(ctx, ok, func(context.Context, error) error { return nil })
	}
	for range f {
		_ = m.breakers[name].ExecuteWithFallback(ctx, ok, func(_ context.Context, err error) error { return err })
	}
}

// forcedWithin waits until breaker name of m is in state want and returns
// how long it took from since.
func forcedWithin(t *testing.T, m *holdMember, name string, want breaker.State, since time.Time) time.Duration {
	t.Helper()
	eventually.True(t, fmt.Sprintf("%s %v", name, want), func() bool { return m.state(name) == want })
	return time.Since(since)
}

func TestAHoldFollowsTheFleetAcrossNewInstancesRestartsAndACollectorRestart(t *testing.T) {
	clk := clocktest.NewRunning()
	mod := func(c *Config) { c.Clock = clk }
	h := startHarness(t, "", mod)
	ctx := context.Background()
	fleet := map[string]*holdMember{}
	for _, inst := range []string{"checkout-1", "checkout-2", "checkout-3"} {
		fleet[inst] = startHoldMember(t, h, clk, "checkout", inst, nil, "payments", "inventory")
	}
	eventually.True(t, "three instances", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil && d.Instances == 3
	})

	hold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill the payments fallback", Actor: "ann"})
	if err != nil {
		t.Fatalf("CreateHold: %v", err)
	}
	for _, m := range fleet {
		forcedWithin(t, m, "payments", breaker.ForcedOpen, time.Now())
		if m.state("inventory") != breaker.Closed {
			t.Fatalf("inventory is %v: the hold covers payments only", m.state("inventory"))
		}
	}
	before := map[string]breaker.Totals{}
	snap := func(m *holdMember, inst string) { before[inst] = m.breakers["payments"].Snapshot().Totals }
	for inst, m := range fleet {
		snap(m, inst)
	}

	// A new instance and a restart under a new id are forced open within a
	// second of their hello.
	start := time.Now()
	fleet["checkout-new"] = startHoldMember(t, h, clk, "checkout", "checkout-new", nil, "payments", "inventory")
	newTook := forcedWithin(t, fleet["checkout-new"], "payments", breaker.ForcedOpen, start)
	fleet["checkout-1"].close(t)
	start = time.Now()
	fleet["checkout-1b"] = startHoldMember(t, h, clk, "checkout", "checkout-1b", nil, "payments", "inventory")
	restartTook := forcedWithin(t, fleet["checkout-1b"], "payments", breaker.ForcedOpen, start)
	t.Logf("forced open after start (dial + hello + command): new instance %v, restarted instance %v", newTook, restartTook)
	if newTook > time.Second || restartTook > time.Second {
		t.Fatalf("forced open %v and %v after start, want within 1s", newTook, restartTook)
	}
	snap(fleet["checkout-new"], "checkout-new")
	snap(fleet["checkout-1b"], "checkout-1b")
	delete(fleet, "checkout-1") // gone; it counted nothing during the hold after its snapshot
	delete(before, "checkout-1")

	// Known outcomes during the hold, before the collector restarts...
	want := protocol.Counts{}
	i := 0
	for inst, m := range fleet {
		i++
		m.drive("payments", i+2, i)
		want.RejectedForced += int64(2*i + 2)
		want.FallbackSuccess += int64(i + 2)
		want.FallbackFailure += int64(i)
		_ = inst
	}

	// ... the collector restarts: the hold is still there and applied to
	// the instances that come back and to one that is new.
	addr := h.srv.Listener.Addr().String()
	eventually.True(t, "counts before the restart", func() bool {
		return sumCounts(h.col.holds.holdCounts(hold.ID)).RejectedForced == want.RejectedForced
	})
	h.stop()
	h = startHarnessOn(t, h.path, addr, mod)
	live, err := h.col.Holds(ctx, true, 0)
	if err != nil || len(live) != 1 || live[0].ID != hold.ID {
		t.Fatalf("live holds after the restart = %+v, %v", live, err)
	}
	start = time.Now()
	fleet["checkout-late"] = startHoldMember(t, h, clk, "checkout", "checkout-late", nil, "payments")
	lateTook := forcedWithin(t, fleet["checkout-late"], "payments", breaker.ForcedOpen, start)
	t.Logf("after the collector restart: a new instance forced open %v after start", lateTook)
	snap(fleet["checkout-late"], "checkout-late")
	for inst, m := range fleet {
		eventually.True(t, inst+" reconnected", func() bool { return m.ag.Stats().Connected })
		if m.state("payments") != breaker.ForcedOpen {
			t.Fatalf("%s payments is %v after the collector restart", inst, m.state("payments"))
		}
		m.drive("payments", 1, 1)
		want.RejectedForced += 2
		want.FallbackSuccess++
		want.FallbackFailure++
	}
	// The tiles still say who held the breakers and why, though this
	// collector never saw the transitions that forced them.
	eventually.True(t, "every line held by ann's hold after the restart", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		if err != nil || len(d.PerInstance) == 0 {
			return false
		}
		for _, ib := range d.PerInstance {
			if !ib.Stale && (ib.Held == nil || ib.Held.HoldID != hold.ID || ib.Held.Actor != "ann" || ib.Held.Reason != "drill the payments fallback") {
				return false
			}
		}
		return d.Held != nil && d.Held.Actor == "ann"
	})
	eventually.True(t, "every instance answered", func() bool {
		got, err := h.col.Hold(ctx, hold.ID)
		if err != nil {
			return false
		}
		for _, c := range got.Coverage {
			if c.Status != cbdash.TargetApplied && c.Instance != "checkout-1" {
				return false
			}
		}
		return len(got.Coverage) == 6
	})

	// Release: every instance returns to its automatic state, and the audit
	// log says who released it and why.
	eventually.True(t, "counts before the release", func() bool {
		return sumCounts(h.col.holds.holdCounts(hold.ID)).RejectedForced == want.RejectedForced
	})
	if _, err := h.col.ReleaseHold(ctx, cbdash.Actor{Name: "rita"}, hold.ID, ""); !errors.Is(err, cbdash.ErrInvalid) {
		t.Fatalf("release without a reason = %v, want ErrInvalid", err)
	}
	rel, err := h.col.ReleaseHold(ctx, cbdash.Actor{Name: "rita"}, hold.ID, "drill over")
	if err != nil {
		t.Fatalf("ReleaseHold: %v", err)
	}
	if rel.ReleasedBy != "rita" || rel.ReleaseReason != "drill over" {
		t.Fatalf("released hold %+v", rel)
	}
	for inst, m := range fleet {
		forcedWithin(t, m, "payments", breaker.Closed, time.Now())
		after := m.breakers["payments"].Snapshot().Totals
		b := before[inst]
		if got := after.RejectedForcedOpen - b.RejectedForcedOpen; got == 0 {
			t.Fatalf("%s rejected nothing during the hold", inst)
		}
	}
	cmds, err := h.store.Commands(ctx, cbdash.CommandQuery{Service: "checkout", Breaker: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 || cmds[0].Action != protocol.ActionRelease || cmds[0].Actor != "rita" || cmds[0].Reason != "drill over" || cmds[0].HoldID != hold.ID {
		t.Fatalf("newest audit entry %+v, want rita's release of %s", cmds[0], hold.ID)
	}
	eventually.True(t, "release answered", func() bool {
		c, err := h.store.Command(ctx, cmds[0].ID)
		if err != nil {
			return false
		}
		for _, tg := range c.Targets {
			if tg.Status != cbdash.TargetApplied || tg.State != protocol.StateClosed {
				return false
			}
		}
		return len(c.Targets) == len(fleet)
	})

	// The drill's totals are what the breakers counted, exactly: per
	// instance as their own totals moved during the hold, and in sum.
	eventually.True(t, "final counts", func() bool {
		return sumCounts(h.col.holds.holdCounts(hold.ID)).RejectedForced == want.RejectedForced
	})
	h.col.holds.flushStats(ctx)
	stored, err := h.store.HoldStats(ctx, hold.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := sumCounts(stored)
	if got.RejectedForced != want.RejectedForced || got.FallbackSuccess != want.FallbackSuccess || got.FallbackFailure != want.FallbackFailure {
		t.Fatalf("hold counted rejected %d, fallbacks %d served / %d failed; the breakers counted %d, %d / %d",
			got.RejectedForced, got.FallbackSuccess, got.FallbackFailure, want.RejectedForced, want.FallbackSuccess, want.FallbackFailure)
	}
	for _, s := range stored {
		m := fleet[s.Instance]
		if m == nil {
			continue
		}
		d := m.breakers["payments"].Snapshot().Totals
		if b := before[s.Instance]; s.Counts.RejectedForced != int64(d.RejectedForcedOpen-b.RejectedForcedOpen) ||
			s.Counts.FallbackSuccess != int64(d.FallbackSuccesses-b.FallbackSuccesses) {
			t.Fatalf("%s: hold counted %+v, its breaker moved by rejected %d, fallbacks %d", s.Instance, s.Counts,
				d.RejectedForcedOpen-b.RejectedForcedOpen, d.FallbackSuccesses-b.FallbackSuccesses)
		}
	}
	rep, err := h.col.HoldReport(ctx, hold.ID)
	if err != nil {
		t.Fatalf("HoldReport: %v", err)
	}
	if tc := rep.Total.Counts; tc.RejectedForced != want.RejectedForced || tc.FallbackSuccess != want.FallbackSuccess ||
		tc.FallbackFailure != want.FallbackFailure || rep.Ongoing || len(rep.Instances) != 6 {
		t.Fatalf("report total %+v over %d instances (ongoing %v), want %+v", tc, len(rep.Instances), rep.Ongoing, want)
	}
	late := 0
	for _, in := range rep.Instances {
		if in.JoinedLate {
			late++
		}
	}
	if late != 3 { // checkout-new, checkout-1b, checkout-late
		t.Fatalf("%d instances joined later, want 3: %+v", late, rep.Instances)
	}
	for _, m := range fleet { // before the second collector stops (cleanups run in reverse)
		m.close(t)
	}
}

func sumCounts(cs []cbdash.HoldCounts) protocol.Counts {
	var sum protocol.Counts
	for _, c := range cs {
		sum.Add(c.Counts)
	}
	return sum
}

func TestFleetSelectorsCoverWhatTheySayAndShareKeepsItsSideAcrossRestarts(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	ctx := context.Background()
	eu, us := map[string]string{"region": "eu"}, map[string]string{"region": "us"}
	// ShareBucket: checkout-1 4.07 (in a 50% share), checkout-2 86.18 (out).
	c1 := startHoldMember(t, h, clk, "checkout", "checkout-1", eu, "inventory", "payments")
	c2 := startHoldMember(t, h, clk, "checkout", "checkout-2", us, "inventory", "payments")
	k1 := startHoldMember(t, h, clk, "catalog", "catalog-1", eu, "inventory", "pricing")
	s1 := startHoldMember(t, h, clk, "search", "search-1", eu, "index")
	eventually.True(t, "four instances", func() bool { return len(h.col.live.Instances()) == 4 })

	req := func(sel cbdash.Selector, action string) cbdash.HoldRequest {
		return cbdash.HoldRequest{Selector: sel, Action: action, TTL: 10 * time.Minute, Reason: "inventory is down", Actor: "ann"}
	}
	plan, err := h.col.PlanHold(context.Background(), req(cbdash.Selector{Service: "*", Breaker: "inventory"}, protocol.ActionForceOpen))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(plan.Services) != "[catalog checkout]" || len(plan.Instances) != 3 || plan.Eligible != 3 {
		t.Fatalf("plan of */inventory = %+v", plan)
	}
	fleetHold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, req(cbdash.Selector{Service: "*", Breaker: "inventory"}, protocol.ActionForceOpen))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*holdMember{c1, c2, k1} {
		forcedWithin(t, m, "inventory", breaker.ForcedOpen, time.Now())
	}
	for name, st := range map[string]breaker.State{"payments": c1.state("payments"), "pricing": k1.state("pricing"), "index": s1.state("index")} {
		if st != breaker.Closed {
			t.Fatalf("%s is %v: */inventory trips only breakers named inventory", name, st)
		}
	}

	// A newer hold narrowed by label takes precedence where it matches.
	euHold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, req(cbdash.Selector{Service: "*", Breaker: "inventory", Labels: eu}, protocol.ActionForceClosed))
	if err != nil {
		t.Fatal(err)
	}
	forcedWithin(t, c1, "inventory", breaker.ForcedClosed, time.Now())
	forcedWithin(t, k1, "inventory", breaker.ForcedClosed, time.Now())
	if c2.state("inventory") != breaker.ForcedOpen {
		t.Fatalf("checkout-2 (region us) inventory is %v, want still forced open by %s", c2.state("inventory"), fleetHold.ID)
	}
	if hs := h.col.HoldsCovering(cbdash.DependencyKey{Service: "checkout", Breaker: "inventory"}); len(hs) != 2 || hs[0].ID != euHold.ID {
		t.Fatalf("holds covering checkout/inventory = %v, want the label hold first", hs)
	}
	// Its release gives the fleet hold back to the instances it had taken.
	if _, err := h.col.ReleaseHold(ctx, cbdash.Actor{Name: "ann"}, euHold.ID, "eu is fine"); err != nil {
		t.Fatal(err)
	}
	forcedWithin(t, c1, "inventory", breaker.ForcedOpen, time.Now())
	forcedWithin(t, k1, "inventory", breaker.ForcedOpen, time.Now())
	if _, err := h.col.ReleaseHold(ctx, cbdash.Actor{Name: "ann"}, fleetHold.ID, "inventory is back"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*holdMember{c1, c2, k1} {
		forcedWithin(t, m, "inventory", breaker.Closed, time.Now())
	}

	// A 50% share by hash: checkout-1 is in, checkout-2 out, and each keeps
	// its side when it restarts under the same id.
	share, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, req(cbdash.Selector{Service: "checkout", Breaker: "payments", Share: 50}, protocol.ActionForceOpen))
	if err != nil {
		t.Fatal(err)
	}
	forcedWithin(t, c1, "payments", breaker.ForcedOpen, time.Now())
	if c2.state("payments") != breaker.Closed {
		t.Fatalf("checkout-2 (bucket %.2f) is %v in a 50%% share", cbdash.ShareBucket("checkout-2"), c2.state("payments"))
	}
	c1.close(t)
	c2.close(t)
	c1 = startHoldMember(t, h, clk, "checkout", "checkout-1", eu, "inventory", "payments")
	c2 = startHoldMember(t, h, clk, "checkout", "checkout-2", us, "inventory", "payments")
	forcedWithin(t, c1, "payments", breaker.ForcedOpen, time.Now())
	eventually.True(t, "checkout-2 back", func() bool { return c2.ag.Stats().Connected })
	if c2.state("payments") != breaker.Closed {
		t.Fatalf("restarted checkout-2 is %v, want still outside the share", c2.state("payments"))
	}
	got, err := h.col.Hold(ctx, share.ID)
	if err != nil {
		t.Fatal(err)
	}
	late := 0
	for _, c := range got.Coverage {
		if c.Instance != "checkout-1" {
			t.Fatalf("share hold covered %s", c.Instance)
		}
		if c.JoinedLate {
			late++
		}
	}
	if len(got.Coverage) != 2 || late != 1 {
		t.Fatalf("coverage %+v, want checkout-1 twice (its restart joined late)", got.Coverage)
	}
}
