package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// asyncBatch is batch seq of one instance: a one-second report of 10
// calls in second seq, and, when trans, a transition (of generation
// poisonGeneration, which poisonTransitions refuses).
func asyncBatch(seq uint64, trans bool) *protocol.Batch {
	t0 := clocktest.Epoch()
	b := &protocol.Batch{Seq: seq, Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli() + int64(seq)*1000, Millis: 1000,
		State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 10, Successes: 10}}}}
	if trans {
		b.Transitions = []protocol.Transition{{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: t0.UnixMilli() + int64(seq)*1000,
			Generation: poisonGeneration}}
	}
	return b
}

// storedAdmitted is the sum of admitted calls in windows_second.
func storedAdmitted(t *testing.T, s *Store) int64 {
	t.Helper()
	var admitted int64
	if err := s.rdb.QueryRowContext(context.Background(), "SELECT coalesce(sum(admitted), 0) FROM windows_second").Scan(&admitted); err != nil {
		t.Fatal(err)
	}
	return admitted
}

// poisonGeneration is the generation of the transitions
// poisonTransitions has the database refuse.
const poisonGeneration = 666

// poisonTransitions has the database refuse every transition of
// generation poisonGeneration (a trigger): a batch that carries one
// fails, the others are written.
func poisonTransitions(t *testing.T, s *Store) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER poison BEFORE INSERT ON transitions WHEN NEW.generation = 666
		BEGIN SELECT RAISE(ABORT, 'poisoned transition'); END`}
	if s.w.d.postgres {
		stmts = []string{`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.generation = 666 THEN RAISE EXCEPTION 'poisoned transition'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER poison BEFORE INSERT ON transitions FOR EACH ROW EXECUTE FUNCTION poison()`}
	}
	for _, q := range stmts {
		if _, err := s.wdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// openPoisonedHeld opens a store that refuses poisoned transitions
// (poisonTransitions) with its writer held, as openHeld.
func openPoisonedHeld(t *testing.T, name string) (*Store, func()) {
	t.Helper()
	s, err := Open(context.Background(), testDSN(t, name), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	poisonTransitions(t, s)
	return s, holdWriter(t, s)
}

// newStream is a Stream of instance pay/inst (started at 1) with room
// for size batches.
func newStream(t *testing.T, s *Store, inst string, size int) *Stream {
	t.Helper()
	st, err := s.NewStream("pay", inst, 1, size)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// save queues b on st, failing the test on an error.
func save(t *testing.T, st *Stream, b *protocol.Batch) {
	t.Helper()
	if err := st.Save(context.Background(), b, clocktest.Epoch(), false); err != nil {
		t.Fatalf("Save %d = %v", b.Seq, err)
	}
}

// onWriter runs fn on the writer's goroutine (in a group of its own,
// between the ops queued before and after it), for a look at what only
// the writer touches.
func onWriter(t *testing.T, s *Store, fn func()) {
	t.Helper()
	if err := s.w.do(context.Background(), &op{run: func(*wtx) error { fn(); return nil }}); err != nil {
		t.Fatal(err)
	}
}

// Many agents queue batches on streams of their own (a queue of 4, so
// that some wait for room), each until the store refuses, while Close
// runs; each receives the outcomes on its own goroutine, as its room
// requires. Every Save either returns an error (ErrClosed, and no
// outcome comes for it) or has exactly one outcome, sent before Close
// returns, without an error (what was queued is committed by the
// writer's last drain). Reopened, the store holds exactly the batches
// reported stored: each instance's last seq is its highest, and the
// calls sum to 10 a batch.
func TestAStreamTellsEveryQueuedBatchOnceAcrossClose(t *testing.T) {
	dsn := testDSN(t, "close.db")
	s, err := Open(context.Background(), dsn, Options{QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	const agents, room = 12, 8
	type agent struct {
		st      *Stream
		queued  uint64           // Save returned nil for 1..queued
		waiting int              // outcomes not received
		got     map[uint64]int   // outcomes received, by seq
		stored  uint64           // highest seq reported stored
		errs    map[uint64]error // outcomes with an error
	}
	as := make([]*agent, agents)
	var mu sync.Mutex
	dones := 0
	receive := func(a *agent) {
		o := a.st.Next()
		a.waiting--
		a.got[o.Batch.Seq]++
		if o.Err != nil {
			a.errs[o.Batch.Seq] = o.Err
		}
		if o.Stored {
			a.stored = max(a.stored, o.Batch.Seq)
		}
		mu.Lock()
		dones++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range agents {
		a := &agent{st: newStream(t, s, fmt.Sprintf("pay-%d", g), room), got: map[uint64]int{}, errs: map[uint64]error{}}
		as[g] = a
		wg.Go(func() {
			for seq := uint64(1); ; seq++ {
				if a.waiting == room {
					receive(a)
				}
				if err := a.st.Save(context.Background(), asyncBatch(seq, false), clocktest.Epoch(), false); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("agent %d seq %d: Save = %v, want nil or ErrClosed", g, seq, err)
					}
					return
				}
				a.queued, a.waiting = seq, a.waiting+1
			}
		})
	}
	eventually.True(t, "some batches committed", func() bool { mu.Lock(); defer mu.Unlock(); return dones >= 200 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var total int64
	for g, a := range as {
		// Sent before Close returned: they are all in the stream now.
		if n := len(a.st.out); n != a.waiting {
			t.Fatalf("agent %d: %d outcomes sent when Close returned, %d not received", g, n, a.waiting)
		}
		for a.waiting > 0 {
			receive(a)
		}
		for seq := uint64(1); seq <= a.queued; seq++ {
			if n := a.got[seq]; n != 1 {
				t.Errorf("agent %d seq %d: queued, %d outcomes, want one", g, seq, n)
			}
			if err := a.errs[seq]; err != nil {
				t.Errorf("agent %d seq %d: outcome %v, want the queued batch committed", g, seq, err)
			}
		}
		if len(a.got) != int(a.queued) {
			t.Errorf("agent %d: outcomes for %d seqs, %d queued", g, len(a.got), a.queued)
		}
		total += int64(a.stored)
	}
	t.Logf("%d batches reported stored", total)
	s2, err := Open(context.Background(), dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for g, a := range as {
		last, err := s2.LastSeq(context.Background(), "pay", fmt.Sprintf("pay-%d", g), 1)
		if err != nil || last != a.stored {
			t.Errorf("agent %d: LastSeq = %d, %v; want %d, the highest reported stored", g, last, err, a.stored)
		}
	}
	if got := storedAdmitted(t, s2); got != 10*total {
		t.Errorf("stored %d admitted calls, want %d (10 for each of %d batches reported stored)", got, 10*total, total)
	}
}

// In one group, an agent's batch 1 is written, its batch 2 fails (the
// database refuses its transition) and its batch 3 comes after; another
// agent's batch in the same group is written. The failure is told at
// once, before batch 1's commit; batch 3 is not written but held (the
// writer does not wait: the group commits) until the failure is
// answered; Stop ends it with ErrSkipped, and a batch 4 saved later too.
// The store's last seq for the agent is 1, not 3 or 4 (a later batch
// stored past the failed one would make the failed one look stored).
func TestAFailedBatchHoldsItsStreamUntilStop(t *testing.T) {
	s, release := openPoisonedHeld(t, "stop.db")
	a, b := newStream(t, s, "pay-1", 8), newStream(t, s, "pay-2", 8)
	save(t, a, asyncBatch(1, false))
	save(t, a, asyncBatch(2, true))
	save(t, b, asyncBatch(1, false))
	save(t, a, asyncBatch(3, false))
	release()
	if o := a.Next(); o.Batch.Seq != 2 || o.Stored || o.Err == nil || errors.Is(o.Err, ErrSkipped) {
		t.Fatalf("first outcome of pay-1: %d %v %v, want batch 2's failure, told before the commit", o.Batch.Seq, o.Stored, o.Err)
	}
	if o := a.Next(); o.Batch.Seq != 1 || !o.Stored || o.Err != nil {
		t.Fatalf("second outcome of pay-1: %d %v %v, want batch 1 stored", o.Batch.Seq, o.Stored, o.Err)
	}
	if o := b.Next(); o.Batch.Seq != 1 || !o.Stored || o.Err != nil {
		t.Fatalf("pay-2: %d %v %v, want batch 1 stored", o.Batch.Seq, o.Stored, o.Err)
	}
	var held []uint64
	onWriter(t, s, func() {
		for _, o := range a.parked {
			held = append(held, o.batch.Seq)
		}
	})
	if fmt.Sprint(held) != "[3]" {
		t.Fatalf("held batches of pay-1 %v, want [3]", held)
	}
	a.Stop()
	save(t, a, asyncBatch(4, false))
	for _, want := range []uint64{3, 4} {
		if o := a.Next(); o.Batch.Seq != want || o.Stored || !errors.Is(o.Err, ErrSkipped) {
			t.Fatalf("after Stop: %d %v %v, want batch %d ErrSkipped", o.Batch.Seq, o.Stored, o.Err, want)
		}
	}
	for inst, want := range map[string]uint64{"pay-1": 1, "pay-2": 1} {
		if last, err := s.LastSeq(context.Background(), "pay", inst, 1); err != nil || last != want {
			t.Errorf("LastSeq %s = %d, %v; want %d", inst, last, err, want)
		}
	}
	if got := storedAdmitted(t, s); got != 20 {
		t.Errorf("stored %d admitted calls, want 20 (pay-1/1 and pay-2/1)", got)
	}
	// Counted when their group ends, which may be after they were told.
	eventually.True(t, "1 failed and 2 skipped operations counted", func() bool {
		st := s.Stats()
		return st.FailedOps == 1 && st.SkippedOps == 2
	})
}

// Resume (the failed batch refused for good) writes the held batches in
// order, before a batch saved after it; a held batch that fails again
// holds the stream again, and the one behind it waits for the second
// answer: Stop then skips it. Batch 2 and 4 carry a refused transition:
// 1, 3 and 5 are stored, 6 is skipped, the last seq is 5.
func TestResumeWritesTheHeldBatchesInOrder(t *testing.T) {
	s, release := openPoisonedHeld(t, "resume.db")
	a := newStream(t, s, "pay-1", 8)
	for seq := uint64(1); seq <= 3; seq++ {
		save(t, a, asyncBatch(seq, seq == 2))
	}
	release()
	next := func(wantSeq uint64, wantStored bool, wantErr string) {
		t.Helper()
		o := a.Next()
		got := "nil"
		switch {
		case errors.Is(o.Err, ErrSkipped):
			got = "skipped"
		case o.Err != nil:
			got = "failed"
		}
		if o.Batch.Seq != wantSeq || o.Stored != wantStored || got != wantErr {
			t.Fatalf("outcome %d stored %v err %v; want %d stored %v err %s", o.Batch.Seq, o.Stored, o.Err, wantSeq, wantStored, wantErr)
		}
	}
	next(2, false, "failed")
	next(1, true, "nil")
	save(t, a, asyncBatch(4, true))
	a.Resume()
	save(t, a, asyncBatch(5, false))
	next(4, false, "failed") // 3 and 4 were written in order: 4's failure first
	next(3, true, "nil")
	save(t, a, asyncBatch(6, false))
	// 5 was saved after Resume but before 4 failed and was parked; 6
	// waits with it. One failure (4's) is unanswered.
	var held []uint64
	onWriter(t, s, func() {
		for _, o := range a.parked {
			held = append(held, o.batch.Seq)
		}
	})
	if fmt.Sprint(held) != "[5 6]" {
		t.Fatalf("held %v, want [5 6]", held)
	}
	a.Resume()
	next(5, true, "nil")
	next(6, true, "nil")
	if last, err := s.LastSeq(context.Background(), "pay", "pay-1", 1); err != nil || last != 6 {
		t.Fatalf("LastSeq = %d, %v; want 6", last, err)
	}
	if got := storedAdmitted(t, s); got != 40 {
		t.Errorf("stored %d admitted calls, want 40 (1, 3, 5, 6)", got)
	}
}

// A batch its owner has the store skip (ErrSkipped: its stream was
// stopped after a failure) is not the database's trouble: when it is the
// last op the writer ran, the store is still writable (Writable, which
// /readyz asks, is nil), and it is counted as skipped, not as failed.
func TestASkippedBatchDoesNotMakeTheStoreUnwritable(t *testing.T) {
	s, release := openPoisonedHeld(t, "skipw.db")
	a := newStream(t, s, "pay-1", 8)
	save(t, a, asyncBatch(1, true))
	release()
	if o := a.Next(); o.Err == nil {
		t.Fatal("the poisoned batch was stored")
	}
	// A write that commits: the store is fine again.
	if _, err := s.SaveBatch(context.Background(), "pay", "pay-2", 1, *asyncBatch(1, false), clocktest.Epoch()); err != nil {
		t.Fatal(err)
	}
	a.Stop()
	save(t, a, asyncBatch(2, false))
	if o := a.Next(); !errors.Is(o.Err, ErrSkipped) {
		t.Fatalf("outcome %v, want ErrSkipped", o.Err)
	}
	// Counted as skipped, not as a failed write
	// (cbdash_store_failed_operations_total), when its group ends.
	eventually.True(t, "the skip counted", func() bool { return s.Stats().SkippedOps == 1 })
	if st := s.Stats(); st.FailedOps != 1 {
		t.Errorf("stats %+v, want the poisoned batch failed and one skipped", st)
	}
	if err := s.Writable(context.Background()); err != nil {
		t.Fatalf("Writable after a skipped batch = %v, want nil", err)
	}
}

// A batch still held for an answer when the store closes ends with
// ErrSkipped (its answer can no longer be queued), and an answer after
// Close does nothing.
func TestAHeldBatchEndsWithErrSkippedAtClose(t *testing.T) {
	s, release := openPoisonedHeld(t, "closeheld.db")
	a := newStream(t, s, "pay-1", 8)
	save(t, a, asyncBatch(1, true))
	save(t, a, asyncBatch(2, false))
	release()
	if o := a.Next(); o.Batch.Seq != 1 || o.Err == nil {
		t.Fatalf("outcome %d %v, want batch 1's failure", o.Batch.Seq, o.Err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-a.out:
		if o.Batch.Seq != 2 || !errors.Is(o.Err, ErrSkipped) {
			t.Fatalf("outcome %d %v, want batch 2 ErrSkipped", o.Batch.Seq, o.Err)
		}
	default:
		t.Fatal("no outcome for the held batch when Close returned")
	}
	a.Resume()
	if err := a.Save(context.Background(), asyncBatch(3, false), clocktest.Epoch(), false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Save after Close = %v, want ErrClosed", err)
	}
}
