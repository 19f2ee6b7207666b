package collector

import (
	"context"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestABreakerRowAnotherCollectorsHelloDeletedIsWrittenAgain: instance i1
// of api declares db and cache through collector A, whose store writer
// caches db's row; a new run of i1 says hello through B declaring cache
// only, which deletes db's row. The old run, still connected to A, then
// reports db tripping: its state must be stored (one collector recreates
// the row of a breaker a batch names), not written to the deleted row's id
// (where it went nowhere before issue 36: A's cache did not see B's
// delete). B tells A on the bus (channel "forget") and A drops the cached
// rows of i1.
func TestABreakerRowAnotherCollectorsHelloDeletedIsWrittenAgain(t *testing.T) {
	t.Parallel()
	skipWithoutPostgres(t)
	clk := clocktest.NewRunning()
	a, b := twoCollectorsOnClock(t, clk)
	ctx := context.Background()

	old := dialRaw(t, a, a.token)
	old.hello("i1", 1)
	old.send(a.batch(1, 10, 0))
	var ack protocol.Ack
	old.expect(protocol.TypeAck, &ack)

	h := rawHello("i1", 2)
	h.Breakers = h.Breakers[1:] // cache only
	if h.Breakers[0].Name != "cache" {
		t.Fatalf("hello declares %v", h.Breakers)
	}
	next := dialRaw(t, b, b.token)
	next.send(h)
	next.expect(protocol.TypeWelcome, nil)
	dbRow := func() (state string, ok bool) {
		ibs, err := a.store.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ib := range ibs {
			if ib.Instance == "i1" && ib.Breaker == "db" {
				return ib.State, true
			}
		}
		return "", false
	}
	if _, ok := dbRow(); ok {
		t.Fatal("db's row is still stored after a hello that no longer declares it")
	}
	eventually.True(t, "A told of B's delete", func() bool { return a.col.fleet.fg.applied.Load() >= 1 })

	old.send(a.batch(2, 10, 8, a.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	old.expect(protocol.TypeAck, &ack)
	if ack.Seq != 2 {
		t.Fatalf("ack %+v, want seq 2", ack)
	}
	state, ok := dbRow()
	if !ok || state != protocol.StateOpen {
		t.Fatalf("db of i1 stored %q (row there: %v) after the old run reported it open through A, want open", state, ok)
	}
}
