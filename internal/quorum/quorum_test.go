package quorum_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/holds"
	"github.com/cbdash/cbdash/internal/quorum"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Advisor on a real holds.Manager and a real store, on a virtual
// clock; live state is the dependency's instance lines, set by the test,
// and the agents' connections record what they are sent.

var payments = cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}

type conn struct {
	mu  sync.Mutex
	got []cbdash.Command
}

func (c *conn) Deliver(cmd cbdash.Command, _ time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, cmd)
}

// world is n instances of checkout with breaker payments, their lines,
// a holds manager and an advisor.
type world struct {
	t     *testing.T
	clk   *breakertest.Clock
	mu    sync.Mutex
	lines []*cbdash.InstanceBreaker
	conns map[string]*conn
	m     *holds.Manager
	a     *quorum.Advisor
	rules []cbdash.QuorumRule
}

func newWorld(t *testing.T, n int, rule string) *world {
	t.Helper()
	r, err := cbdash.ParseQuorumRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clk: clocktest.Virtual(), conns: map[string]*conn{}, rules: []cbdash.QuorumRule{r}}
	for i := range n {
		name := fmt.Sprintf("i%d", i)
		w.conns[name] = &conn{}
		w.lines = append(w.lines, &cbdash.InstanceBreaker{Service: "checkout", Instance: name, Breaker: "payments", State: protocol.StateClosed,
			Config: &protocol.BreakerConfig{OpenDurationMillis: 10_000},
			Last:   &protocol.Window{Headroom: protocol.Headroom{Calls: 20, MinimumCalls: 10, FailureRateThreshold: 50}}})
	}
	w.m = holds.New(holds.Config{Instances: w, Store: storetest.Open(t, w.clk), Events: nop{}, Cluster: nop{}, Now: w.clk.Now,
		CommandDelivery: time.Minute, Log: slog.New(slog.DiscardHandler)})
	if err := w.m.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.a = w.advisor()
	return w
}

// advisor is a new Advisor on w (a collector taking over the lead has
// one with an empty memory).
func (w *world) advisor() *quorum.Advisor {
	return quorum.New(quorum.Config{Rules: w.rules, Holds: w.m, Live: w, Now: w.clk.Now, Log: slog.New(slog.DiscardHandler)})
}

type nop struct{}

func (nop) Publish(cbdash.Event)                {}
func (nop) HoldChanged(context.Context, string) {}

func (w *world) HoldInstances() []holds.Instance {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []holds.Instance
	for _, ib := range w.lines {
		out = append(out, w.instanceLocked(ib))
	}
	return out
}

func (w *world) HoldInstance(k holds.Key) (holds.Instance, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ib := range w.lines {
		if ib.Instance == k.Instance && ib.Service == k.Service {
			return w.instanceLocked(ib), true
		}
	}
	return holds.Instance{}, false
}

func (w *world) instanceLocked(ib *cbdash.InstanceBreaker) holds.Instance {
	return holds.Instance{Ref: cbdash.InstanceRef{Service: ib.Service, Instance: ib.Instance}, StartedAt: 1,
		Breakers: []string{ib.Breaker}, Conn: w.conns[ib.Instance]}
}

func (w *world) Dependencies() []cbdash.Dependency {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := make([]*cbdash.InstanceBreaker, len(w.lines))
	for i, ib := range w.lines {
		c := *ib
		lines[i] = &c
	}
	return []cbdash.Dependency{{DependencyKey: payments, Instances: len(lines), PerInstance: lines}}
}

// set puts the named instances in state s.
func (w *world) set(s string, instances ...int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, i := range instances {
		w.lines[i].State, w.lines[i].LastTransition = s, w.clk.Now()
	}
}

// advisories is the quorum's holds, newest first.
func (w *world) advisories() []cbdash.HoldRecord {
	w.t.Helper()
	hs, err := w.m.Holds(context.Background(), false, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []cbdash.HoldRecord
	for _, h := range hs {
		if h.Actor == cbdash.QuorumActor {
			out = append(out, h)
		}
	}
	return out
}

// The quorum's figures go into the advisory, which goes only to the
// closed instances.
func TestAnAdvisoryGoesToTheInstancesThatHaveNotTripped(t *testing.T) {
	w := newWorld(t, 5, "checkout/*:q=50%,m=3")
	w.set(protocol.StateOpen, 0, 1)
	w.a.Check(t.Context())
	if n := len(w.advisories()); n != 0 {
		t.Fatalf("%d advisories on 2 of 5 (m=3), want none", n)
	}
	w.set(protocol.StateHalfOpen, 2)
	w.a.Check(t.Context())
	adv := w.advisories()
	if len(adv) != 1 {
		t.Fatalf("%d advisories on 3 of 5, want 1", len(adv))
	}
	if got := strings.Join(adv[0].Selector.Instances, ","); got != "i3,i4" || adv[0].TTL != 10*time.Second {
		t.Errorf("advisory to %s for %v, want i3,i4 for the open duration 10s", got, adv[0].TTL)
	}
	if !strings.HasPrefix(adv[0].Reason, "quorum: 3 of 5 instances at minimum calls tripped on their own (60 % >= 50 %, at least 3: i0, i1, i2)") {
		t.Errorf("reason %q", adv[0].Reason)
	}
	w.a.Check(t.Context())
	if n := len(w.advisories()); n != 1 {
		t.Errorf("%d advisories after another check, want still 1", n)
	}
}

// An operator's hold keeps its instances out of an advisory (a newer
// hold would otherwise take precedence over it).
func TestAnAdvisoryLeavesAnOperatorsHoldAlone(t *testing.T) {
	w := newWorld(t, 5, "checkout/payments:m=3")
	if _, err := w.m.Create(t.Context(), cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments", Instances: []string{"i4"}},
		Action: protocol.ActionForceClosed, TTL: time.Hour, Reason: "canary stays on", Actor: "ann"}); err != nil {
		t.Fatal(err)
	}
	w.set(protocol.StateOpen, 0, 1, 2)
	w.a.Check(t.Context())
	adv := w.advisories()
	if len(adv) != 1 || !slices.Equal(adv[0].Selector.Instances, []string{"i3"}) {
		t.Fatalf("advisories %+v, want one to i3 alone", adv)
	}
}

// An operator's release is the last word until the quorum dissolves; a
// new quorum after that is advised again.
func TestAnOperatorsReleaseHoldsUntilTheQuorumDissolves(t *testing.T) {
	w := newWorld(t, 6, "checkout/*:q=50%,m=3")
	w.set(protocol.StateOpen, 0, 1, 2)
	w.a.Check(t.Context())
	adv := w.advisories()
	if len(adv) != 1 {
		t.Fatalf("%d advisories, want 1", len(adv))
	}
	w.clk.Advance(time.Second)
	if _, err := w.m.Release(t.Context(), adv[0].ID, "ann", "we know, it is the test env"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.clk.Advance(250 * time.Millisecond)
		w.a.Check(t.Context())
	}
	if n := len(w.advisories()); n != 1 {
		t.Fatalf("%d advisories after the operator's release, want still 1", n)
	}
	w.set(protocol.StateClosed, 0, 1, 2)
	w.a.Check(t.Context())
	w.set(protocol.StateOpen, 3, 4, 5)
	w.a.Check(t.Context())
	if adv := w.advisories(); len(adv) != 2 || !slices.Equal(adv[0].Selector.Instances, []string{"i0", "i1", "i2"}) {
		t.Fatalf("advisories %+v, want a second one to i0, i1, i2 once the first quorum dissolved", adv)
	}
}

// A collector that takes over the lead finds the live advisory and ends
// it at the quorum's first close; at the end of its box, a quorum still
// met is advised again.
func TestATakeoverEndsTheAdvisoryAtTheFirstCloseAndABoxIsAdvisedAgain(t *testing.T) {
	w := newWorld(t, 4, "checkout/*:q=50%,m=3,box=5s")
	w.set(protocol.StateOpen, 0, 1, 2)
	w.a.Check(t.Context())
	first := w.advisories()
	w.clk.Advance(5 * time.Second)
	w.m.Sweep(t.Context())
	w.a.Check(t.Context())
	adv := w.advisories()
	if len(first) != 1 || len(adv) != 2 || adv[0].ID == first[0].ID || !adv[1].ReleasedAt.IsZero() {
		t.Fatalf("advisories %+v, want the first expired (not released) and a second one", adv)
	}
	next := w.advisor()
	w.clk.Advance(100 * time.Millisecond)
	w.set(protocol.StateClosed, 1)
	next.Check(t.Context())
	got, err := w.m.Hold(t.Context(), adv[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ReleasedBy != cbdash.QuorumActor || got.ReleaseReason != "quorum's first close: checkout/i1 closed again" {
		t.Errorf("released by %q: %q; want the quorum's first close", got.ReleasedBy, got.ReleaseReason)
	}
	cmds := w.conns["i3"]
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	if n := len(cmds.got); n != 3 || cmds.got[2].Action != protocol.ActionRelease || cmds.got[2].Actor != cbdash.QuorumActor {
		t.Errorf("i3 was sent %+v; want two advisories and the release", cmds.got)
	}
}

// A closed instance that no live advisory names (one that came back from
// an advisory whose end was seen before its own, or a new one) is advised
// on top; the first close releases every live advisory.
func TestAnInstanceALiveAdvisoryMissedIsAdvisedOnTop(t *testing.T) {
	w := newWorld(t, 5, "checkout/*:q=50%,m=3")
	w.set(protocol.StateOpen, 0, 1, 2)
	w.a.Check(t.Context())
	w.mu.Lock()
	w.conns["i5"] = &conn{}
	late := *w.lines[4]
	late.Instance = "i5"
	w.lines = append(w.lines, &late)
	w.mu.Unlock()
	w.a.Check(t.Context())
	adv := w.advisories()
	if len(adv) != 2 || strings.Join(adv[0].Selector.Instances, ",") != "i5" || strings.Join(adv[1].Selector.Instances, ",") != "i3,i4" {
		t.Fatalf("advisories %+v, want i3,i4 and then i5 on top", adv)
	}
	w.set(protocol.StateClosed, 0)
	w.a.Check(t.Context())
	var waves []string
	for _, h := range w.advisories() {
		switch {
		case strings.HasPrefix(h.Reason, "quorum's first close, staggered return: "):
			waves = append(waves, fmt.Sprintf("%v for %v", h.Selector.Instances, h.TTL))
		case h.ReleasedBy != cbdash.QuorumActor:
			t.Errorf("advisory to %v not released at the first close", h.Selector.Instances)
		}
	}
	// i3 returns at once; i4 and i5 over the open duration (10 s), in
	// waves held by advisories that end by themselves.
	if got := strings.Join(waves, ", "); got != "[i5] for 6.666s, [i4] for 3.333s" {
		t.Errorf("staggered return %q", got)
	}
	w.a.Check(t.Context())
	for _, h := range w.advisories()[:2] {
		if !h.ReleasedAt.IsZero() {
			t.Errorf("a wave of the staggered return was released: %+v", h)
		}
	}
}
