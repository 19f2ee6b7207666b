package collector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// A session that goes away writes what its agent was owed, in order
// (welcome, then the acks of its batches), with the fatal error last and
// then the close frame: nothing queued after the error is written.
func TestGoingAwayWritesQueuedAcksInOrderErrorLast(t *testing.T) {
	h := startHarness(t, "", nil)
	old := dialRaw(t, h, h.token)
	old.hello("a1", 1)
	const batches = 40
	for seq := uint64(1); seq <= batches; seq++ {
		old.send(h.batch(seq, 3, 0))
	}
	// Every batch committed and its outcome recorded (the queue gauge goes
	// back to 0 only after that): its ack is queued (or written) before the
	// replacement below queues the error. Committed alone was not enough:
	// on a busy machine the replacement came between a commit and its
	// outcome, and the last acks were (rightly) not owed.
	eventually.True(t, "all batches stored and answered", func() bool {
		last, err := h.store.LastSeq(context.Background(), "api", "a1", 1)
		return err == nil && last == batches && h.col.ing.QueueDepth() == 0
	})
	fresh := dialRaw(t, h, h.token)
	fresh.hello("a1", 1)
	var last uint64
	for {
		typ, data, err := old.next()
		if err != nil {
			t.Fatalf("read before the error: %v", err)
		}
		if typ == protocol.TypeError {
			if !strings.Contains(string(data), "replaced by a newer connection") {
				t.Fatalf("error %s", data)
			}
			break
		}
		if typ != protocol.TypeAck {
			t.Fatalf("got %s %s before the error", typ, data)
		}
		var a protocol.Ack
		if err := json.Unmarshal(data, &a); err != nil {
			t.Fatal(err)
		}
		if a.Seq <= last {
			t.Fatalf("ack %d after ack %d", a.Seq, last)
		}
		last = a.Seq
	}
	if typ, data, err := old.next(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("after the error: %s %s (%v), want close 1001", typ, data, err)
	}
	if last != batches {
		t.Fatalf("last ack before the error %d, want %d", last, batches)
	}
}
