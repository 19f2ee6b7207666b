package cluster

import (
	"bytes"
	"testing"
)

// TestASubscriberThatNeverDrainsHoldsAtMostItsBytes: a subscriber that
// never reads is dropped once the payloads waiting for it would exceed
// the bound, so what the node holds for it stays under the bound
// (issue 36: the backlog of two collectors behind their bus sat in their
// memory); one that reads keeps every message, in order, and an empty
// subscriber takes one message larger than the bound.
func TestASubscriberThatNeverDrainsHoldsAtMostItsBytes(t *testing.T) {
	const bound = 64 << 10
	s := newSubscribers(8192, bound)
	stuck, cancelStuck := s.add("live")
	defer cancelStuck()
	reader, cancelReader := s.add("live")
	defer cancelReader()
	payload := bytes.Repeat([]byte("x"), 7800)
	dropped := false
	for i := range 100 {
		s.deliver(Message{Channel: "live", From: "b", Payload: payload})
		if got := <-reader; len(got.Payload) != len(payload) {
			t.Fatalf("message %d: the reading subscriber got %d bytes", i, len(got.Payload))
		}
		held, drops := s.stats()
		if held > bound {
			t.Fatalf("after %d messages the node holds %d bytes for its subscribers, over the bound %d", i+1, held, bound)
		}
		if drops > 0 && !dropped {
			dropped = true
			if want := bound / len(payload); i != want {
				t.Fatalf("dropped after %d messages, want %d (%d bytes each, bound %d)", i+1, want+1, len(payload), bound)
			}
		}
	}
	if !dropped {
		t.Fatal("the subscriber that never reads was not dropped")
	}
	n := 0
	for range stuck {
		n++
	}
	if n != bound/len(payload) {
		t.Fatalf("the stuck subscriber's channel held %d messages, want %d", n, bound/len(payload))
	}

	big, cancelBig := s.add("holds")
	defer cancelBig()
	s.deliver(Message{Channel: "holds", Payload: make([]byte, 2*bound)})
	if m := <-big; len(m.Payload) != 2*bound {
		t.Fatalf("an empty subscriber got %d bytes of a message larger than the bound", len(m.Payload))
	}
}
