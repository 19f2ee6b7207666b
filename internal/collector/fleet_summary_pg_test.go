package collector

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// twoCollectors starts collectors A and B over one new PostgreSQL schema,
// each on its own bus (node ids na and nb), their configs adjusted by mod
// (nil: none); it skips without PostgreSQL.
func twoCollectors(t *testing.T, na, nb string, mod func(*Config)) (a, b *harness) {
	t.Helper()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn := storetest.Postgres(t)
	clk := clocktest.NewRunning()
	openBus := func(node string) cluster.Bus {
		bus, err := cluster.Open(context.Background(), cluster.Config{URL: dsn, NodeID: node, Clock: clk, Reconnect: time.Second,
			LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bus.Close() })
		return bus
	}
	busA, busB := openBus(na), openBus(nb)
	with := func(bus cluster.Bus) func(*Config) {
		return func(c *Config) {
			c.Clock, c.Cluster = clk, bus
			if mod != nil {
				mod(c)
			}
		}
	}
	a = startHarness(t, dsn, with(busA))
	b = startHarness(t, dsn, with(busB))
	eventually.True(t, "A and B see each other on the bus", func() bool {
		pa, oka := busA.(peered)
		pb, okb := busB.(peered)
		return oka && okb && pa.Peers() > 0 && pb.Peers() > 0
	})
	return a, b
}

// connect says hello as instance inst to h and has its first batch
// (admitted calls, failures of them) acked.
func connect(t *testing.T, h *harness, inst string, admitted, failures int64) *rawAgent {
	t.Helper()
	ag := dialRaw(t, h, h.token)
	ag.hello(inst, 1)
	ag.send(h.batch(1, admitted, failures))
	var ack protocol.Ack
	ag.expect(protocol.TypeAck, &ack)
	return ag
}

// TestACollectorShowsTheOthersInstancesFromTheirSummaries: dependency
// api/db is served on A (a1) and on B (b1, b2). A's live view counts the
// three instances and the calls of all three (B's from its summaries)
// while holding a line of a1 only; b1's trip on B reaches A's
// subscribers as a transition and a view with one instance open, without
// waiting for B's next summary; and A's dependency API lists b1 and b2
// from the store.
func TestACollectorShowsTheOthersInstancesFromTheirSummaries(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "suma", "sumb", nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	connect(t, a, "a1", 10, 0)
	b1 := connect(t, b, "b1", 10, 5)
	connect(t, b, "b2", 20, 0)

	view := func() cbdash.Dependency {
		d, _ := a.col.live.Dependency(k)
		return d
	}
	eventually.True(t, "A counting a1, b1 and b2, and the calls of the three", func() bool {
		d := view()
		return d.Instances == 3 && d.ByState[protocol.StateClosed] == 3 && d.Recent.Admitted == 40 && d.Recent.Failures == 5
	})
	d := view()
	if d.FailureRate != 12.5 || d.State != protocol.StateClosed {
		t.Fatalf("A's view: failure rate %v %%, state %q; want 12.5 %% (5 of 40), closed", d.FailureRate, d.State)
	}
	if len(d.PerInstance) != 1 || d.PerInstance[0].Instance != "a1" {
		t.Fatalf("A's live lines: %v, want a1's only", instancesOf(d.PerInstance))
	}
	if n := a.col.live.InstancesHeld(); n != 1 {
		t.Fatalf("A holds %d instances, want 1 (a1): B's are summarised", n)
	}
	if n := b.col.live.InstancesHeld(); n != 2 {
		t.Fatalf("B holds %d instances, want 2 (b1, b2)", n)
	}

	_, events, cancel := a.col.Subscribe()
	defer cancel()
	b1.send(b.batch(2, 10, 10, b.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	var sawTrip, sawOpen bool
	deadline := time.After(time.Minute) // a bound for a broken build only: the wait is on the events
	for !sawTrip || !sawOpen {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("A's subscription ended")
			}
			switch {
			case e.Kind == cbdash.EventTransition && e.Transition.Instance == "b1" && e.Transition.To == protocol.StateOpen:
				sawTrip = true
			case e.Kind == cbdash.EventDependency && e.Dependency.DependencyKey == k && e.Dependency.ByState[protocol.StateOpen] == 1:
				if !sawTrip {
					t.Fatal("A published b1 open before its transition")
				}
				if e.Dependency.State != protocol.StateOpen || e.Dependency.Instances != 3 {
					t.Fatalf("A's view at b1's trip: state %q, %d instances; want open, 3", e.Dependency.State, e.Dependency.Instances)
				}
				sawOpen = true
			}
		case <-deadline:
			t.Fatalf("A's subscriber: trip seen %v, open view seen %v", sawTrip, sawOpen)
		}
	}

	eventually.True(t, "A's dependency API listing a1, b1 open (from the store) and b2", func() bool {
		d, err := a.col.Dependency(k)
		if err != nil || len(d.PerInstance) != 3 {
			return false
		}
		got := instancesOf(d.PerInstance)
		return slices.Equal(got, []string{"a1", "b1", "b2"}) && d.PerInstance[1].State == protocol.StateOpen
	})
	for _, d := range a.col.DependenciesWithMembers() { // api/db and api/cache
		if got := instancesOf(d.PerInstance); !slices.Equal(got, []string{"a1", "b1", "b2"}) {
			t.Fatalf("A's dependencies with members: %s lists %v, want a1, b1, b2", d.DependencyKey, got)
		}
	}
	if n := a.col.live.InstancesHeld(); n != 1 {
		t.Fatalf("A holds %d instances after the listing, want 1", n)
	}
}

// TestAnInstanceThatMovesIsCountedOnce: b1 served by B reconnects to A;
// A counts it once (its own line), B forgets it at A's claim.
func TestAnInstanceThatMovesIsCountedOnce(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "mova", "movb", nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	b1 := connect(t, b, "b1", 10, 0)
	connect(t, b, "b2", 10, 0)
	eventually.True(t, "A counting b1 and b2", func() bool {
		d, _ := a.col.live.Dependency(k)
		return d.Instances == 2
	})
	_ = b1.conn.Close(websocket.StatusNormalClosure, "moving")
	eventually.True(t, "B seeing b1 gone", func() bool { return b.col.live.ConnOf(live.Key{Service: "api", Instance: "b1"}) == nil })
	ag := dialRaw(t, a, a.token)
	ag.hello("b1", 1)
	eventually.True(t, "B forgetting b1, A and B counting two instances", func() bool {
		da, _ := a.col.live.Dependency(k)
		db, _ := b.col.live.Dependency(k)
		return b.col.live.InstancesHeld() == 1 && da.Instances == 2 && db.Instances == 2
	})
}

// TestADeadCollectorsSummariesGoWithIt: B stops (its bus closed, as a
// kill -9 closes its connections); A stops counting B's instances within
// seconds, not RemoteExpiry later: they reconnect elsewhere, where they
// would be counted twice.
func TestADeadCollectorsSummariesGoWithIt(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "deada", "deadb", nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	connect(t, a, "a1", 10, 0)
	connect(t, b, "b1", 10, 0)
	eventually.True(t, "A counting a1 and b1", func() bool {
		d, _ := a.col.live.Dependency(k)
		return d.Instances == 2
	})
	b.stop()
	_ = b.col.cfg.Cluster.Close()
	stopped := time.Now()
	eventually.True(t, "A counting a1 only", func() bool {
		d, _ := a.col.live.Dependency(k)
		return d.Instances == 1
	})
	t.Logf("A dropped B's summaries %v after B stopped", time.Since(stopped).Round(time.Millisecond))
}

// TestAQuorumDependencyKeepsEveryLine: with a quorum rule on api/db, A
// holds the line of b1 (on B) for api/db, which the leader's advisor
// reads, and B's summary for api/cache; its view counts each instance
// once.
func TestAQuorumDependencyKeepsEveryLine(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "qua", "qub", func(c *Config) { c.Quorum = quorumRules(t, "api/db:q=50%,m=2,box=1m") })
	connect(t, a, "a1", 10, 0)
	b1 := connect(t, b, "b1", 10, 0)
	db, cache := cbdash.DependencyKey{Service: "api", Breaker: "db"}, cbdash.DependencyKey{Service: "api", Breaker: "cache"}
	eventually.True(t, "A holding a1's and b1's lines of api/db, counting both of api/cache", func() bool {
		d, _ := a.col.live.Dependency(db)
		c, _ := a.col.live.Dependency(cache)
		return slices.Equal(instancesOf(d.PerInstance), []string{"a1", "b1"}) && d.Instances == 2 &&
			c.Instances == 2 && slices.Equal(instancesOf(c.PerInstance), []string{"a1"})
	})
	b1.send(b.batch(2, 10, 10, b.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	eventually.True(t, "A's line of b1 open", func() bool {
		d, _ := a.col.live.Dependency(db)
		return len(d.PerInstance) == 2 && d.PerInstance[1].State == protocol.StateOpen && d.Instances == 2
	})
}

func instancesOf(lines []*cbdash.InstanceBreaker) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Instance
	}
	return out
}
