package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// asyncBatch is batch seq of one instance: a one-second report of 10
// calls in second seq, and, when trans, a transition.
func asyncBatch(seq uint64, trans bool) *protocol.Batch {
	t0 := clocktest.Epoch()
	b := &protocol.Batch{Seq: seq, Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli() + int64(seq)*1000, Millis: 1000,
		State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 10, Successes: 10}}}}
	if trans {
		b.Transitions = []protocol.Transition{{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: t0.UnixMilli() + int64(seq)*1000}}
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

// Many goroutines queue batches with SaveBatchAsync (on a queue of 4, so
// that some wait for room), each until the store refuses, while Close runs: every call either returns
// an error (ErrClosed, and its done is never called) or has its done
// called exactly once, before Close returns, without an error (what was
// queued is committed by the writer's last drain). Reopened, the store
// holds exactly the batches reported stored: each instance's last seq is
// its highest, and the calls sum to 10 a batch.
func TestSaveBatchAsyncTellsEveryQueuedBatchOnceAcrossClose(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t, "close.db")
	s, err := Open(context.Background(), dsn, Options{QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		queued atomic.Bool  // SaveBatchAsync returned nil
		done   atomic.Int32 // times done was called
		stored atomic.Bool
		err    atomic.Value
	}
	// Each agent queues until the store refuses: Close comes while they do.
	const agents, perAgent = 12, 1 << 20
	calls := make([][]*call, agents)
	var refused atomic.Int32
	var dones atomic.Int64
	var wg sync.WaitGroup
	for g := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAgent {
				c := &call{}
				calls[g] = append(calls[g], c)
				err := s.SaveBatchAsync(context.Background(), "pay", fmt.Sprintf("pay-%d", g), 1, asyncBatch(uint64(i+1), false), clocktest.Epoch(),
					Async{Done: func(stored bool, err error) {
						c.stored.Store(stored)
						if err != nil {
							c.err.Store(err)
						}
						c.done.Add(1)
						dones.Add(1)
					}})
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("agent %d seq %d: SaveBatchAsync = %v, want nil or ErrClosed", g, i+1, err)
					}
					refused.Add(1)
					return
				}
				c.queued.Store(true)
			}
		}()
	}
	eventually.True(t, "some batches committed", func() bool { return dones.Load() >= 200 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if refused.Load() != agents {
		t.Errorf("%d of %d agents were refused by the closed store", refused.Load(), agents)
	}
	want := map[int]uint64{}
	var total int64
	for g := range agents {
		for i, c := range calls[g] {
			switch n := c.done.Load(); {
			case !c.queued.Load() && n != 0:
				t.Errorf("agent %d seq %d: refused by SaveBatchAsync, yet done was called %d times", g, i+1, n)
			case c.queued.Load() && n != 1:
				t.Errorf("agent %d seq %d: queued, done called %d times, want once", g, i+1, n)
			}
			if err, _ := c.err.Load().(error); err != nil {
				t.Errorf("agent %d seq %d: done(%v), want the queued batch committed", g, i+1, err)
			}
			if c.stored.Load() {
				want[g] = uint64(i + 1)
				total++
			}
		}
	}
	t.Logf("%d batches reported stored, %d dones in all", total, dones.Load())
	s2, err := Open(context.Background(), dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for g := range agents {
		last, err := s2.LastSeq(context.Background(), "pay", fmt.Sprintf("pay-%d", g), 1)
		if err != nil || last != want[g] {
			t.Errorf("agent %d: LastSeq = %d, %v; want %d, the highest reported stored", g, last, err, want[g])
		}
	}
	if got := storedAdmitted(t, s2); got != 10*total {
		t.Errorf("stored %d admitted calls, want %d (10 for each of %d batches reported stored)", got, 10*total, total)
	}
}

// In one group, an agent's batch 1 is written, its batch 2 fails (the
// transitions table's cause column is renamed) and batch 3 is asked to
// be skipped by the agent's skip, which says yes once batch 2 failed.
// Another agent's batch in the same group is written. The failure is told
// at once, before batch 3's skip is asked and before batch 1's commit is;
// batch 3 is ErrSkipped (never written, its skip asked once); each done
// is called once; the store's last seq for the agent is 1, not 3 (a later
// batch stored past the failed one would make it look stored).
func TestSaveBatchAsyncTellsAFailureBeforeTheNextBatchOfTheGroupRuns(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), testDSN(t, "skip.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.wdb.Exec(`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`); err != nil {
		t.Fatal(err)
	}
	entered, hold := make(chan struct{}), make(chan struct{})
	go s.w.do(context.Background(), &op{run: func(*wtx) error {
		close(entered)
		<-hold
		return nil
	}})
	<-entered

	var mu sync.Mutex
	var events []string
	failed := false
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	type outcome struct {
		stored bool
		err    error
	}
	results := make(chan [2]any, 8)
	queue := func(instance string, b *protocol.Batch, skip func() bool) {
		t.Helper()
		err := s.SaveBatchAsync(context.Background(), "pay", instance, 1, b, clocktest.Epoch(), Async{Skip: skip, Done: func(stored bool, err error) {
			mu.Lock()
			if err != nil && !errors.Is(err, ErrSkipped) && instance == "pay-1" {
				failed = true
			}
			events = append(events, fmt.Sprintf("done %s/%d %v", instance, b.Seq, err == nil))
			mu.Unlock()
			results <- [2]any{fmt.Sprintf("%s/%d", instance, b.Seq), outcome{stored, err}}
		}})
		if err != nil {
			t.Fatalf("SaveBatchAsync %s/%d = %v", instance, b.Seq, err)
		}
	}
	skipFor := func(seq uint64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("skip? pay-1/%d", seq))
			return failed
		}
	}
	queue("pay-1", asyncBatch(1, false), skipFor(1))
	queue("pay-1", asyncBatch(2, true), skipFor(2))
	queue("pay-2", asyncBatch(1, false), nil)
	queue("pay-1", asyncBatch(3, false), skipFor(3))
	record("release")
	close(hold)

	got := map[string]outcome{}
	for range 4 {
		r := <-results
		if _, dup := got[r[0].(string)]; dup {
			t.Errorf("%s: done called twice", r[0])
		}
		got[r[0].(string)] = r[1].(outcome)
	}
	if o := got["pay-1/1"]; !o.stored || o.err != nil {
		t.Errorf("pay-1/1 = %+v, want stored", o)
	}
	if o := got["pay-1/2"]; o.stored || o.err == nil || errors.Is(o.err, ErrSkipped) {
		t.Errorf("pay-1/2 = %+v, want its write's failure", o)
	}
	if o := got["pay-1/3"]; o.stored || !errors.Is(o.err, ErrSkipped) {
		t.Errorf("pay-1/3 = %+v, want ErrSkipped", o)
	}
	if o := got["pay-2/1"]; !o.stored || o.err != nil {
		t.Errorf("pay-2/1 = %+v, want stored", o)
	}
	mu.Lock()
	order := fmt.Sprint(events)
	mu.Unlock()
	want := fmt.Sprint([]string{"release", "skip? pay-1/1", "skip? pay-1/2", "done pay-1/2 false", "skip? pay-1/3", "done pay-1/3 false",
		"done pay-1/1 true", "done pay-2/1 true"})
	if order != want {
		t.Errorf("events\n got %s\nwant %s", order, want)
	}
	for inst, want := range map[string]uint64{"pay-1": 1, "pay-2": 1} {
		if last, err := s.LastSeq(context.Background(), "pay", inst, 1); err != nil || last != want {
			t.Errorf("LastSeq %s = %d, %v; want %d", inst, last, err, want)
		}
	}
	if got := storedAdmitted(t, s); got != 20 {
		t.Errorf("stored %d admitted calls, want 20 (pay-1/1 and pay-2/1)", got)
	}
}

// A batch its owner asks to skip (ErrSkipped: one of its session's
// batches failed, or the session ended while handing a later one) is not
// the database's trouble: when it is the last op the writer ran, the
// store is still writable (Writable, which /readyz asks, is nil), and no
// write has failed for the database's sake.
func TestASkippedBatchDoesNotMakeTheStoreUnwritable(t *testing.T) {
	t.Parallel()
	s, release := openHeld(t, "skipw.db")
	done := make(chan error, 1)
	err := s.SaveBatchAsync(context.Background(), "pay", "pay-1", 1, asyncBatch(1, false), clocktest.Epoch(),
		Async{Skip: func() bool { return true }, Done: func(stored bool, err error) { done <- err }})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; !errors.Is(err, ErrSkipped) {
		t.Fatalf("done(%v), want ErrSkipped", err)
	}
	// Counted as skipped, not as a failed write (cbdash_store_failed_operations_total).
	eventually.True(t, "the skip counted", func() bool { return s.Stats().SkippedOps == 1 })
	if st := s.Stats(); st.FailedOps != 0 {
		t.Errorf("stats after a skipped batch: %+v, want no failed operation", st)
	}
	if err := s.Writable(context.Background()); err != nil {
		t.Fatalf("Writable after a skipped batch = %v, want nil", err)
	}
}
