package collector

import (
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// TestInstancesThatMoveAreNeverCountedTwice: a1 on A, b1, b2 and b3 on
// B, four in all. b1 moves to A (its session on B ends) and back to B
// (failback), then B dies and b1, b2 and b3 reconnect to A. A's view of
// api/db never counts more than four instances: not at each hello on A,
// while B's summary (its last, for a dead B) still counts the instance,
// nor in any view A published meanwhile; nor fewer while B is alive (b1
// leaving A is counted in B's part from B's claim on); B's view counts
// four at b1's hello there; A counts four once all are back and B's part
// has gone. (A counted a moved
// instance twice, in its own line and in B's summary, until B's next
// summary or B's part was dropped.)
func TestInstancesThatMoveAreNeverCountedTwice(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "twicea", "twiceb", nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	connect(t, a, "a1", 10, 0)
	onB := map[string]*rawAgent{}
	for _, inst := range []string{"b1", "b2", "b3"} {
		onB[inst] = connect(t, b, inst, 10, 0)
	}
	view := func() cbdash.Dependency {
		d, _ := a.col.live.Dependency(k)
		return d
	}
	eventually.True(t, "A counting a1, b1, b2 and b3", func() bool { return view().Instances == 4 })
	_, events, cancel := a.col.Subscribe()
	defer cancel()
	// least is what A counts at the least: four while B's part counts
	// the instances still on B, fewer once A drops the part of a dead B
	// (those not reconnected yet are counted nowhere).
	check := func(what string, least int) {
		t.Helper()
		most, fewest := 0, 4
		for drained := false; !drained; {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("%s: A's subscription ended", what)
				}
				if e.Kind == cbdash.EventDependency && e.Dependency.DependencyKey == k {
					most, fewest = max(most, e.Dependency.Instances), min(fewest, e.Dependency.Instances)
				}
			default:
				drained = true
			}
		}
		if n := view().Instances; n < least || n > 4 || most > 4 || fewest < least {
			t.Fatalf("%s: A counts %d instances, %d to %d in its events; want %d to 4", what, n, fewest, most, least)
		}
	}

	_ = onB["b1"].conn.Close(websocket.StatusNormalClosure, "moving")
	eventually.True(t, "B seeing b1 gone", func() bool { return b.col.live.ConnOf(live.Key{Service: "api", Instance: "b1"}) == nil })
	onA := connect(t, a, "b1", 10, 0)
	check("b1 moved to A", 4)
	eventually.True(t, "B forgetting b1", func() bool { return b.col.live.InstancesHeld() == 2 })
	eventually.True(t, "B's next summary at A (b2's and b3's last windows only)", func() bool {
		for _, p := range a.col.live.Parts() {
			if p.DependencyKey == k && p.Instances == 2 && p.Last.Admitted == 20 {
				return true
			}
		}
		return false
	})
	check("B's next summary", 4)

	// Failback: b1 leaves A for B again. A counts it in B's part from
	// B's claim on (it forgot its line), B takes it out of A's part at
	// its hello.
	_ = onA.conn.Close(websocket.StatusNormalClosure, "failback")
	eventually.True(t, "A seeing b1 gone", func() bool { return a.col.live.ConnOf(live.Key{Service: "api", Instance: "b1"}) == nil })
	onB["b1"] = dialRaw(t, b, b.token)
	onB["b1"].hello("b1", 1)
	onB["b1"].send(b.batch(2, 10, 0)) // its seq 1 is stored: B would not apply it again
	onB["b1"].expect(protocol.TypeAck, &protocol.Ack{})
	if d, _ := b.col.live.Dependency(k); d.Instances != 4 {
		t.Fatalf("b1 back on B: B counts %d instances, want 4", d.Instances)
	}
	eventually.True(t, "A forgetting b1, B's next summary at A counting b1, b2 and b3", func() bool {
		for _, p := range a.col.live.Parts() {
			if p.DependencyKey == k && p.Instances == 3 && p.Last.Admitted == 30 {
				return a.col.live.InstancesHeld() == 1
			}
		}
		return false
	})
	check("b1 back on B", 4)
	if d, _ := b.col.live.Dependency(k); d.Instances != 4 {
		t.Fatalf("b1 back on B, A's next summary: B counts %d instances, want 4", d.Instances)
	}

	b.stop()
	_ = b.col.cfg.Cluster.Close()
	connect(t, a, "b1", 10, 0)
	check("B dead, b1 reconnected to A", 3)
	connect(t, a, "b2", 10, 0)
	connect(t, a, "b3", 10, 0)
	check("B dead, b2 and b3 reconnected to A", 3)
	eventually.True(t, "B's part gone", func() bool { return len(a.col.live.Parts()) == 0 })
	check("B's part gone", 3)
	if d := view(); d.Instances != 4 || len(d.PerInstance) != 4 {
		t.Fatalf("A counts %d instances, %d lines; want 4, 4", d.Instances, len(d.PerInstance))
	}
}
