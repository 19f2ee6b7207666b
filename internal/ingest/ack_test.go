package ingest

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// The ack a session writes by hand is exactly json.Marshal's, which
// agents in other languages were written against (docs/protocol.md).
func TestAckBytesAreJSONMarshals(t *testing.T) {
	t.Parallel()
	for _, seq := range []uint64{0, 1, 42, 1 << 53, math.MaxUint64} {
		got := ackBytes(seq)
		want, err := json.Marshal(protocol.Ack{Type: protocol.TypeAck, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("ack %d = %s, want %s", seq, got, want)
		}
	}
}

// The outbox holds at most OutQueue waiting messages: put refuses the
// next (the session is then closed), putWait waits until the writer has
// taken what waits, and a swap hands back every message in order.
func TestOutboxIsBounded(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	for i := range OutQueue {
		if !o.put([]byte{byte(i)}) {
			t.Fatalf("message %d refused below the bound", i)
		}
	}
	if o.put([]byte("over")) {
		t.Fatal("a message over the bound was queued")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.putWait(context.Background(), []byte("after"))
	}()
	<-o.ready
	batch := o.swap(nil)
	if len(batch) != OutQueue {
		t.Fatalf("swap took %d messages, want %d", len(batch), OutQueue)
	}
	for i, m := range batch {
		if len(m) != 1 || m[0] != byte(i) {
			t.Fatalf("message %d = %q: out of order", i, m)
		}
	}
	<-done // putWait found room
	if got := o.swap(batch); len(got) != 1 || string(got[0]) != "after" {
		t.Fatalf("after the swap: %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for o.put(nil) {
	}
	cancel()
	o.putWait(ctx, []byte("dropped")) // returns: its context is done
	if got := o.swap(nil); len(got) != OutQueue {
		t.Fatalf("%d queued, want %d", len(got), OutQueue)
	}
}
