package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

func window(breaker string, start int64, admitted int64) item {
	w := protocol.Window{Breaker: breaker, Start: start, Millis: 1000, State: protocol.StateClosed,
		Counts:  protocol.Counts{Admitted: admitted, Successes: admitted},
		Latency: make([]int64, protocol.NumLatencyBuckets)}
	w.Latency[0] = admitted
	return newItem(nil, &w, nil)
}

func transitionItem(gen uint64) item {
	t := protocol.Transition{Breaker: "b", From: protocol.StateClosed, To: protocol.StateOpen, At: 1,
		Generation: gen, Cause: protocol.Cause{Kind: protocol.CauseFailureRate}}
	return newItem(&t, nil, nil)
}

func decode(t *testing.T, data []byte) protocol.Batch {
	t.Helper()
	var b protocol.Batch
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(nil, 0); err != nil {
		t.Fatalf("the outbox formed an invalid batch: %v", err)
	}
	return b
}

func TestOutboxSequencesAcksAndResends(t *testing.T) {
	o := newOutbox(1 << 20)
	o.add(transitionItem(1))
	seq1, _, ok := nextBatch(o, 10)
	if !ok || seq1 != 1 {
		t.Fatalf("first batch seq %d ok %v", seq1, ok)
	}
	if _, _, ok := nextBatch(o, 10); ok {
		t.Fatal("a batch was formed from nothing")
	}
	o.add(window("b", 0, 5))
	seq2, _, _ := nextBatch(o, 11)
	o.add(window("b", 1000, 6))
	seq3, data3, _ := nextBatch(o, 12)
	if seq2 != 2 || seq3 != 3 {
		t.Fatalf("seqs %d %d, want 2 3", seq2, seq3)
	}
	o.ack(1)
	// Reconnect: the collector stored up to 2; only 3 is resent, verbatim.
	if ahead := o.welcome(2); ahead {
		t.Fatal("welcome(2) reported the collector ahead")
	}
	seq, data, ok := nextBatch(o, 99)
	if !ok || seq != 3 || string(data) != string(data3) {
		t.Fatalf("resent seq %d (ok %v), want 3 verbatim", seq, ok)
	}
	if _, _, ok := nextBatch(o, 99); ok {
		t.Fatal("resent more than was unacknowledged")
	}
	o.ack(3)
	if s := o.stats(); s.acked != 3 || s.bytes != 0 || s.sent != 4 {
		t.Fatalf("stats %+v, want 3 acked, 4 sent, nothing held", s)
	}
	select {
	case <-o.drain():
	default:
		t.Fatal("an empty outbox is not drained")
	}
}

func TestOutboxSkipsAheadOfACollectorThatHasMore(t *testing.T) {
	o := newOutbox(1 << 20)
	if ahead := o.welcome(41); !ahead {
		t.Fatal("welcome(41) on a fresh outbox did not report the collector ahead")
	}
	o.add(transitionItem(1))
	if seq, _, _ := nextBatch(o, 1); seq != 42 {
		t.Fatalf("next seq %d, want 42", seq)
	}
}

func TestOutboxRefusedBatchIsDroppedAndCounted(t *testing.T) {
	o := newOutbox(1 << 20)
	for i := range 3 {
		o.add(transitionItem(uint64(i)))
		nextBatch(o, 1)
	}
	if !o.refuse(2) {
		t.Fatal("refuse(2) did not find batch 2")
	}
	if o.refuse(2) {
		t.Fatal("refuse(2) found batch 2 twice")
	}
	o.welcome(0)
	var seqs []uint64
	for {
		seq, _, ok := nextBatch(o, 1)
		if !ok {
			break
		}
		seqs = append(seqs, seq)
	}
	if fmt.Sprint(seqs) != "[1 3]" {
		t.Fatalf("resent %v, want [1 3]", seqs)
	}
	o.add(transitionItem(9))
	_, data, _ := nextBatch(o, 2)
	if b := decode(t, data); b.Dropped == nil || b.Dropped.Batches != 1 {
		t.Fatalf("next batch reports dropped %+v, want 1 batch", b.Dropped)
	}
}

func TestOutboxUnderPressureMergesOldestWindowsKeepingCountsAndTransitions(t *testing.T) {
	const limit = minBufferBytes
	o := newOutbox(limit)
	var admitted int64
	for i := range 1000 {
		o.add(window(fmt.Sprint("b", i%3), int64(i)*1000, int64(i)))
		admitted += int64(i)
		if i%100 == 0 {
			o.add(transitionItem(uint64(i)))
		}
		if s := o.stats(); s.bytes > limit {
			t.Fatalf("after %d windows the outbox holds %d bytes, bound %d", i+1, s.bytes, limit)
		}
	}
	d := o.stats().dropped
	if d.Merged == 0 || d.Windows != 0 || d.Transitions != 0 || d.CommandResults != 0 {
		t.Fatalf("dropped %+v: want merges only, every count and transition kept", d)
	}
	var got, transitions int64
	var dropped *protocol.Dropped
	for {
		_, data, ok := nextBatch(o, 1)
		if !ok {
			break
		}
		b := decode(t, data)
		transitions += int64(len(b.Transitions))
		for _, w := range b.Windows {
			got += w.Counts.Admitted
			if w.Latency[0] != w.Counts.Admitted {
				t.Fatalf("merged histogram %v does not match merged counts %d", w.Latency, w.Counts.Admitted)
			}
		}
		if b.Dropped != nil {
			dropped = b.Dropped
		}
		o.ack(b.Seq)
	}
	if transitions != 10 {
		t.Fatalf("%d transitions delivered, want 10", transitions)
	}
	if dropped == nil || !reflect.DeepEqual(*dropped, d) {
		t.Fatalf("batches reported dropped %+v, want %+v", dropped, d)
	}
	if got != admitted {
		t.Fatalf("merging lost counts: %d delivered, %d admitted", got, admitted)
	}
}

func TestOutboxDropsTransitionsOnlyAsALastResort(t *testing.T) {
	o := newOutbox(minBufferBytes)
	o.add(window("b", 0, 1))
	for i := range 1000 {
		o.add(transitionItem(uint64(i)))
	}
	d := o.stats().dropped
	if d.Windows != 1 || d.Transitions == 0 {
		t.Fatalf("dropped %+v: want the window first, then transitions", d)
	}
	if s := o.stats(); s.bytes > minBufferBytes {
		t.Fatalf("holds %d bytes, bound %d", s.bytes, minBufferBytes)
	}
}

func TestMergedWindowsNeverSpanMoreThanAnHour(t *testing.T) {
	o := newOutbox(minBufferBytes)
	for i := range 400 {
		o.add(window("b", int64(i)*60_000, 1)) // one report a minute
	}
	for {
		_, data, ok := nextBatch(o, 1)
		if !ok {
			break
		}
		b := decode(t, data) // Validate refuses a window over an hour
		o.ack(b.Seq)
	}
}

func TestInflightBatchesUseAtMostHalfTheBound(t *testing.T) {
	o := newOutbox(minBufferBytes)
	for i := range 2000 {
		o.add(window("b", int64(i)*1000, 1))
		nextBatch(o, 1) // never acknowledged
		if s := o.stats(); s.bytes > minBufferBytes {
			t.Fatalf("after %d batches the outbox holds %d bytes, bound %d", i+1, s.bytes, minBufferBytes)
		}
	}
	o.mu.Lock()
	inflight := o.inflightBytes
	o.mu.Unlock()
	if inflight > minBufferBytes/2 {
		t.Fatalf("in-flight batches hold %d bytes, more than half of %d", inflight, minBufferBytes)
	}
	if s := o.stats(); s.bytes > minBufferBytes {
		t.Fatalf("holds %d bytes, bound %d", s.bytes, minBufferBytes)
	}
}

// nextBatch is next on a connection that has declared every breaker.
func nextBatch(o *outbox, sentAt int64) (uint64, []byte, bool) {
	seq, data, ok, _ := o.next(sentAt, 0)
	return seq, data, ok
}

func TestOutboxHoldsItemsBackUntilTheirHelloIsSent(t *testing.T) {
	o := newOutbox(1 << 20)
	o.add(transitionItem(1).declaredBy(1), window("new", 0, 1).declaredBy(2))
	seq, data, ok, need := o.next(1, 1)
	if !ok || need || seq != 1 {
		t.Fatalf("next = %d %v %v, want batch 1", seq, ok, need)
	}
	if b := decode(t, data); len(b.Transitions) != 1 || len(b.Windows) != 0 {
		t.Fatalf("batch 1 = %+v, want only the transition of the declared breaker", b)
	}
	if _, _, ok, need := o.next(1, 1); ok || !need {
		t.Fatalf("next = ok %v need %v, want a new hello first", ok, need)
	}
	if seq, _, ok, _ := o.next(1, 2); !ok || seq != 2 {
		t.Fatalf("after the hello next = %d %v, want batch 2", seq, ok)
	}
}

func TestFormingABatchFromAFullOutboxKeepsTheBound(t *testing.T) {
	// A batch's envelope takes a few bytes more than its items: from an
	// outbox filled to just under the bound, forming one must not cross it.
	for n := 160; n < 200; n++ {
		o := newOutbox(minBufferBytes)
		for i := range n { // distinct breakers of varied sizes: nothing merges, the oldest are dropped
			o.add(window(fmt.Sprint("b", i, strings.Repeat("x", i%61)), 0, 1))
		}
		for range 3 {
			nextBatch(o, 1)
			if s := o.stats(); s.bytes > minBufferBytes {
				t.Fatalf("filled with %d windows, the outbox holds %d bytes, bound %d", n, s.bytes, minBufferBytes)
			}
		}
	}
}
