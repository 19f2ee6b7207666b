package ingest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// drainOutbox is the writer's side of an outbox as the session's writer runs it: on
// every ready signal it swaps the waiting messages out, handing back the
// emptied list it took last, until stop is closed and nothing waits.
func drainOutbox(o *outbox, stop <-chan struct{}, got func([]byte)) {
	var spare [][]byte
	for {
		select {
		case <-o.ready:
			batch := o.swap(spare)
			for i, m := range batch {
				got(m)
				batch[i] = nil
			}
			spare = batch[:0]
		case <-stop:
			for _, m := range o.swap(nil) {
				got(m)
			}
			return
		}
	}
}

// Two producers waiting for room at once (the saver's acks and
// sendWait) and one that never waits (send): no ready signal is lost,
// nothing is dropped or duplicated, and each producer's messages come out
// in the order it put them, through many swaps of a full outbox.
func TestOutboxLosesNoWakeupWithConcurrentProducers(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	const n = 5 * OutQueue
	var mu sync.Mutex
	next := map[byte]uint32{}
	var bad []string
	stop := make(chan struct{})
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		drainOutbox(o, stop, func(m []byte) {
			mu.Lock()
			defer mu.Unlock()
			p, i := m[0], binary.BigEndian.Uint32(m[1:])
			if i != next[p] {
				bad = append(bad, string(p)+": out of order")
			}
			next[p] = i + 1
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range []byte{'a', 'b'} {
		wg.Go(func() {
			for i := range uint32(n) {
				m := append([]byte{p}, binary.BigEndian.AppendUint32(nil, i)...)
				o.putWait(ctx, m)
			}
		})
	}
	wg.Go(func() {
		for i := uint32(0); i < n; {
			m := append([]byte{'s'}, binary.BigEndian.AppendUint32(nil, i)...)
			if o.put(m) {
				i++
			}
		}
	})
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("a producer waited for room until its deadline: a wakeup was lost")
	}
	close(stop)
	<-writer
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d messages out of order, first %s", len(bad), bad[0])
	}
	for _, p := range []byte{'a', 'b', 's'} {
		if next[p] != n {
			t.Errorf("producer %c: %d of %d messages written", p, next[p], n)
		}
	}
}

// A lone message wakes the writer: after an empty outbox, after a full
// one was swapped out, and after a swap outside the ready signal (as
// goingAway's drain does) left the signal pending.
func TestOutboxWakesTheWriterForEveryLoneMessage(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	delivered := make(chan []byte, OutQueue)
	stop := make(chan struct{})
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		drainOutbox(o, stop, func(m []byte) { delivered <- m })
	}()
	defer func() { close(stop); <-writer }()
	expect := func(want string) {
		t.Helper()
		select {
		case m := <-delivered:
			if string(m) != want {
				t.Fatalf("writer got %q, want %q", m, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q queued alone never reached the writer: its ready signal was lost", want)
		}
	}
	for i := range 50 {
		o.put([]byte{'a', byte(i)})
		expect(string([]byte{'a', byte(i)}))
	}
	// A swap by someone else than the ready branch (goingAway's drain).
	o.put([]byte("taken"))
	for len(o.swap(nil)) == 0 { // the writer may have taken it first
		select {
		case m := <-delivered:
			if string(m) != "taken" {
				t.Fatalf("writer got %q", m)
			}
		default:
			continue
		}
		break
	}
	o.put([]byte("after a stale signal"))
	expect("after a stale signal")
}

// send queues without blocking up to OutQueue messages and kills the
// session at the next one (its agent does not read), in the order they
// were sent; ending leaves its error to the writer, which writes it after
// them (so it is not lost when nothing more fits in the outbox), and
// signals the writer; a sendWait blocked on the full outbox returns when
// the session's context ends.
func TestSendKillsAtTheBoundAndEndingLeavesTheErrorToTheWriter(t *testing.T) {
	t.Parallel()
	newSession := func() (*session, context.Context) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return &session{c: &Pipeline{log: slog.New(slog.DiscardHandler)}, out: newOutbox(), cancel: cancel, goAway: make(chan struct{}, 1)}, ctx
	}
	cmd := func(i int) protocol.Command {
		return protocol.Command{Type: protocol.TypeCommand, ID: strconv.Itoa(i), Breaker: "db", Action: protocol.ActionForceOpen}
	}

	s, ctx := newSession()
	for i := range OutQueue {
		s.send(cmd(i))
	}
	if s.dead || ctx.Err() != nil {
		t.Fatalf("killed with %d messages waiting, the bound is %d", OutQueue, OutQueue)
	}
	s.send(cmd(OutQueue))
	if !s.dead || ctx.Err() == nil {
		t.Fatal("the message over the bound did not kill the session")
	}
	q := s.out.swap(nil)
	if len(q) != OutQueue {
		t.Fatalf("%d queued, want %d", len(q), OutQueue)
	}
	for i, m := range q {
		var c protocol.Command
		if err := json.Unmarshal(m, &c); err != nil || c.ID != strconv.Itoa(i) {
			t.Fatalf("message %d is %s", i, m)
		}
	}

	s, _ = newSession()
	s.send(cmd(1))
	s.send(cmd(2))
	s.ending("collector stopping", true, websocket.StatusGoingAway)
	// The writer writes the error itself, after what is queued (see
	// the writer): the queue keeps only the commands.
	q = s.out.swap(nil)
	if len(q) != 2 || !strings.Contains(string(q[0]), `"id":"1"`) || !strings.Contains(string(q[1]), `"id":"2"`) {
		t.Fatalf("queue after ending: %q", q)
	}
	if s.closing != "collector stopping" || !s.closeRetry || s.closeCode != websocket.StatusGoingAway {
		t.Fatalf("ending recorded %q retry %v code %v", s.closing, s.closeRetry, s.closeCode)
	}
	select {
	case <-s.goAway:
	default:
		t.Fatal("ending did not signal the writer")
	}

	s, ctx = newSession()
	for i := range OutQueue {
		s.send(cmd(i))
	}
	s.ending("replaced", true, websocket.StatusGoingAway)
	if q := s.out.swap(nil); len(q) != OutQueue {
		t.Fatalf("%d queued after ending on a full outbox, want %d", len(q), OutQueue)
	}
	if s.closing != "replaced" || s.dead {
		t.Fatalf("ending on a full outbox: closing %q dead %v, want the error kept for the writer", s.closing, s.dead)
	}
	select {
	case <-s.goAway:
	default:
		t.Fatal("ending on a full outbox did not signal the writer")
	}
	for range OutQueue {
		s.send(cmd(0))
	}
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		s.sendWait(ctx, cmd(-1))
	}()
	s.kill("test")
	<-waited // returns: the session's context ended
}
