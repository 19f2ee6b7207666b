package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestAHeldAckIsWrittenBeforeARefusalAndBeforeTheSessionEnds: with
// AckDelay the acks of stored batches wait (an hour here, so only what
// the session writes can bring them out), and are written as one: before
// the refusal of a later batch (a refusal always comes after the acks of
// the batches before it, docs/protocol.md), and before the error of a
// session that goes away (replaced by a newer connection).
func TestAHeldAckIsWrittenBeforeARefusalAndBeforeTheSessionEnds(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", func(c *Config) { c.AckDelay = time.Hour })
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.send(h.batch(1, 10, 0))
	a.send(h.batch(2, 10, 0))
	bad := h.batch(3, 10, 0)
	bad.Windows[0].Breaker = "undeclared"
	a.send(bad)
	var ack protocol.Ack
	a.expect(protocol.TypeAck, &ack)
	if ack.Seq != 2 {
		t.Fatalf("ack %d, want one ack of both stored batches (2)", ack.Seq)
	}
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if e.Seq != 3 || e.Fatal {
		t.Fatalf("after the ack: %+v, want the refusal of batch 3", e)
	}

	a.send(h.batch(4, 10, 0))
	// Stored and its outcome recorded: the ack is held, nothing written.
	// (Committed, and the gauge back at 0 after that: the outcome is
	// recorded before the gauge goes down.)
	eventually.True(t, "batch 4 committed", func() bool {
		last, err := h.store.LastSeq(context.Background(), "api", "a1", 1)
		return err == nil && last == 4 && h.col.ing.QueueDepth() == 0
	})
	b := dialRaw(t, h, h.token)
	if w := b.hello("a1", 1); w.LastSeq != 4 {
		t.Fatalf("the newer connection's welcome: last_seq %d, want 4", w.LastSeq)
	}
	a.expect(protocol.TypeAck, &ack)
	if ack.Seq != 4 {
		t.Fatalf("held ack %d, want 4", ack.Seq)
	}
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !strings.Contains(e.Reason, "replaced") {
		t.Fatalf("after the held ack: %+v, want the replaced connection's error", e)
	}
}

// TestAHeldAckIsWrittenWhenItsDelayEnds: with a short AckDelay an ack
// comes by itself, and acks of batches stored within it come as one.
func TestAHeldAckIsWrittenWhenItsDelayEnds(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", func(c *Config) { c.AckDelay = 20 * time.Millisecond })
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	for seq := uint64(1); seq <= 3; seq++ {
		a.send(h.batch(seq, 10, 0))
	}
	var acked []uint64
	for len(acked) == 0 || acked[len(acked)-1] < 3 {
		var ack protocol.Ack
		a.expect(protocol.TypeAck, &ack)
		if len(acked) > 0 && ack.Seq <= acked[len(acked)-1] {
			t.Fatalf("acks %v then %d: not increasing", acked, ack.Seq)
		}
		acked = append(acked, ack.Seq)
	}
	if len(acked) > 3 {
		t.Fatalf("acks %v: more than one a batch", acked)
	}
}
