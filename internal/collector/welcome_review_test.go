package collector

import (
	"context"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// An instance that reconnects with many commands waiting gets its
// welcome first, then every waiting command once, then the acks of its
// batches: all queued through the outbox by the handshake while the
// writer drains it.
func TestReconnectGetsWelcomeThenEveryPendingCommand(t *testing.T) {
	reconnectWithPending(t, 40, 1)
}

// BUG (found in review 5, older than the outbox): the handshake queued
// the waiting commands with send, which kills the session once outQueue
// messages wait; an instance with more than outQueue-1 commands waiting
// was killed at every reconnect ("agent does not read its messages") and
// never got them.
//
// BUG (session 8): the writer emptied the outbox and then answered every
// batch complete by then, so a batch stored while the writer wrote the
// first outQueue commands was acknowledged before the commands the
// handshake queued meanwhile (about one reconnect in ten). The instance
// reconnects reconnects times (the commands stay pending: no result
// answers them), each a chance to catch it.
func TestBugReconnectWithMorePendingCommandsThanTheOutboxHolds(t *testing.T) {
	reconnectWithPending(t, 2*outQueue, 8)
}

func reconnectWithPending(t *testing.T, n, reconnects int) {
	h := startHarness(t, "", nil)
	ctx := context.Background()
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.conn.CloseNow()
	eventually.True(t, "a1 disconnected", func() bool { return len(h.col.live.sessions("api", []string{"a1"})) == 0 })
	want := map[string]bool{}
	for range n {
		cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "cache", Action: protocol.ActionReset, Instance: "a1"})
		if err != nil {
			t.Fatal(err)
		}
		want[cmd.ID] = true
	}
	for r := range reconnects {
		b := dialRaw(t, h, h.token)
		b.send(rawHello("a1", 1))
		b.send(h.batch(uint64(r+1), 1, 0))
		b.expect(protocol.TypeWelcome, nil)
		got := map[string]bool{}
		for len(got) < len(want) {
			var c protocol.Command
			b.expect(protocol.TypeCommand, &c)
			if !want[c.ID] || got[c.ID] {
				t.Fatalf("reconnect %d: command %s: not waiting, or sent twice", r+1, c.ID)
			}
			got[c.ID] = true
		}
		b.expect(protocol.TypeAck, nil)
		b.conn.CloseNow()
		eventually.True(t, "a1 disconnected", func() bool { return len(h.col.live.sessions("api", []string{"a1"})) == 0 })
	}
}
