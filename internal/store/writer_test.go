package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestSaveBatchGivesUpWhenTheQueueIsFullAndCtxEnds(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), testDSN(t, "q.db"), Options{QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Hold the writer inside a transaction, then fill the one queue slot.
	entered, release := make(chan struct{}), make(chan struct{})
	go s.w.do(context.Background(), &op{run: func(*wtx) error {
		close(entered)
		<-release
		return nil
	}})
	<-entered
	if !s.w.try(&op{run: func(*wtx) error { return nil }}) {
		t.Fatal("the queue slot is taken already")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.SaveBatch(ctx, "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SaveBatch on a full queue = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	// The writer drains and takes new work again.
	if stored, err := s.SaveBatch(context.Background(), "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch()); err != nil || !stored {
		t.Fatalf("SaveBatch after the queue drained = %v, %v", stored, err)
	}
}

func TestCloseStopsTheWriterGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Open(context.Background(), testDSN(t, "g.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveBatch(context.Background(), "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesNegativeOptionsNamingTheField(t *testing.T) {
	t.Parallel()
	for field, opts := range map[string]Options{
		"Retention.Minutes": {Retention: Retention{Minutes: -time.Second}},
		"QueueSize":         {QueueSize: -1},
	} {
		t.Run(field, func(t *testing.T) {
			_, err := Open(context.Background(), testDSN(t, "o.db"), opts)
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Fatalf("Open = %v, want an error naming %s", err, field)
			}
		})
	}
}

// A group in which a batch is stored, another op fails (which resets the
// writer's caches), and the same batch arrives again: the resend is
// recognised although its seq is only staged (written by the group's
// flush), and the group's rows are written once.
func TestAGroupRecognisesAResendAfterAFailedOp(t *testing.T) {
	t.Parallel()
	s, release := openHeld(t, "g.db")
	ctx := context.Background()
	t0 := clocktest.Epoch()
	batch := func(seq uint64) protocol.Batch {
		return protocol.Batch{Seq: seq, Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli() + int64(seq)*1000, Millis: 1000,
			State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 10, Successes: 10}}}}
	}
	type result struct {
		stored bool
		err    error
	}
	results := make([]chan result, 4)
	queued := 0
	enqueue := func(i int, f func() (bool, error)) {
		results[i] = make(chan result, 1)
		go func() {
			stored, err := f()
			results[i] <- result{stored, err}
		}()
		queued++
		eventually.True(t, fmt.Sprintf("op %d queued", i), func() bool { return len(s.w.queue) == queued })
	}
	save := func(seq uint64) func() (bool, error) {
		return func() (bool, error) { return s.SaveBatch(ctx, "pay", "pay-1", 1, batch(seq), t0) }
	}
	failing := errors.New("this op fails")
	enqueue(0, save(1))
	enqueue(1, func() (bool, error) { return false, s.w.do(ctx, &op{run: func(*wtx) error { return failing }}) })
	enqueue(2, save(1))
	enqueue(3, save(2))
	release()
	want := []result{{true, nil}, {false, failing}, {false, nil}, {true, nil}}
	for i, ch := range results {
		got := <-ch
		if got.stored != want[i].stored || !errors.Is(got.err, want[i].err) {
			t.Errorf("op %d = %v, %v; want %v, %v", i, got.stored, got.err, want[i].stored, want[i].err)
		}
	}
	if last, err := s.LastSeq(ctx, "pay", "pay-1", 1); err != nil || last != 2 {
		t.Errorf("LastSeq = %d, %v; want 2", last, err)
	}
	var admitted int64
	if err := s.rdb.QueryRowContext(ctx, "SELECT sum(admitted) FROM windows_second").Scan(&admitted); err != nil {
		t.Fatal(err)
	}
	if admitted != 20 {
		t.Errorf("stored %d admitted calls, want 20 (two batches of 10, the resend not counted)", admitted)
	}
	// A later resend of seq 2 is a duplicate too.
	if stored, err := s.SaveBatch(ctx, "pay", "pay-1", 1, batch(2), t0); err != nil || stored {
		t.Errorf("resend of seq 2 = %v, %v; want a duplicate", stored, err)
	}
}

// One group of 237 instances' batches: the staged seqs, last-seen times
// and instance minutes are written in multi-row statements of 100, 10 and
// 1 rows (execRows), every row once, on both backends.
func TestAGroupOfManyInstancesWritesEveryStagedRow(t *testing.T) {
	t.Parallel()
	s, release := openHeld(t, "many.db")
	ctx := context.Background()
	t0 := clocktest.Epoch().Truncate(time.Minute)
	const n = 237
	errs := make(chan error, n)
	for i := range n {
		go func() {
			b := protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli(), Millis: 1000,
				State: protocol.StateClosed, Counts: protocol.Counts{Admitted: int64(i + 1), Successes: int64(i + 1)}}}}
			stored, err := s.SaveBatch(ctx, "pay", fmt.Sprintf("pay-%03d", i), 7, b, t0.Add(time.Duration(i)*time.Millisecond))
			if err == nil && !stored {
				err = fmt.Errorf("batch of pay-%03d not stored", i)
			}
			errs <- err
		}()
	}
	eventually.True(t, "every batch queued", func() bool { return len(s.w.queue) == n })
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if tx := s.Stats().Transactions; tx != 2 {
		t.Fatalf("%d transactions, want 2 (the held one and one group)", tx)
	}
	for i := range n {
		if last, err := s.LastSeq(ctx, "pay", fmt.Sprintf("pay-%03d", i), 7); err != nil || last != uint64(i+1) {
			t.Fatalf("LastSeq of pay-%03d = %d, %v; want %d", i, last, err, i+1)
		}
	}
	var seen, want int64
	for i := range n {
		want += t0.Add(time.Duration(i) * time.Millisecond).UnixMilli()
	}
	if err := s.rdb.QueryRowContext(ctx, "SELECT sum(last_seen) FROM instances").Scan(&seen); err != nil || seen != want {
		t.Errorf("sum of last_seen = %d, %v; want %d (each instance its own batch's time)", seen, err, want)
	}
	mins, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if len(mins) != n {
		t.Fatalf("%d instance minutes, want %d", len(mins), n)
	}
	for _, m := range mins {
		var i int
		fmt.Sscanf(m.Instance, "pay-%03d", &i)
		if m.Calls != int64(i+1) || !m.Start.Equal(t0) {
			t.Errorf("%s: %d calls at %v, want %d at %v", m.Instance, m.Calls, m.Start, i+1, t0)
		}
	}
}

// openHeld opens a store whose writer is held inside a transaction (one
// op that waits) until release is called, so that the ops queued
// meanwhile are committed as one group.
func openHeld(t *testing.T, name string) (*Store, func()) {
	t.Helper()
	s, err := Open(context.Background(), testDSN(t, name), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, holdWriter(t, s)
}

// holdWriter holds s's writer inside a transaction until release is
// called (or the test ends).
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	entered, hold := make(chan struct{}), make(chan struct{})
	go s.w.do(context.Background(), &op{run: func(*wtx) error {
		close(entered)
		<-hold
		return nil
	}})
	<-entered
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return release
}

// An instance minute is written once its minute has ended and the grace
// for late reports has passed, not while it lasts; a late report for it
// adds to the row written.
func TestInstanceMinutesAreWrittenWhenTheirMinuteHasEnded(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	s, err := Open(context.Background(), testDSN(t, "im.db"), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	m0 := clk.Now().Truncate(time.Minute)
	save := func(seq uint64, start time.Time, calls int64) {
		t.Helper()
		b := protocol.Batch{Seq: seq, Windows: []protocol.Window{{Breaker: "db", Start: start.UnixMilli(), Millis: 1000,
			State: protocol.StateClosed, Counts: protocol.Counts{Admitted: calls, Successes: calls}}}}
		if stored, err := s.SaveBatch(ctx, "pay", "pay-1", 1, b, clk.Now()); err != nil || !stored {
			t.Fatalf("batch %d: %v, %v", seq, stored, err)
		}
	}
	stored := func() (rows, calls int64) {
		t.Helper()
		if err := s.rdb.QueryRowContext(ctx, "SELECT count(*), coalesce(sum(calls), 0) FROM instance_minutes").Scan(&rows, &calls); err != nil {
			t.Fatal(err)
		}
		return rows, calls
	}
	clk.Set(m0.Add(5 * time.Second))
	save(1, m0.Add(5*time.Second), 10)
	clk.Advance(instanceMinutesEvery + time.Second) // a round is due, but the minute has not ended
	save(2, m0.Add(16*time.Second), 20)
	if rows, _ := stored(); rows != 0 {
		t.Fatalf("%d instance minute rows while the minute lasts, want 0", rows)
	}
	clk.Set(m0.Add(time.Minute + imGrace + time.Second))
	save(3, m0.Add(time.Minute+imGrace), 300) // the next minute's
	if rows, calls := stored(); rows != 1 || calls != 30 {
		t.Fatalf("after the minute and its grace: %d rows, %d calls; want 1 row of 30 calls", rows, calls)
	}
	// A late report for the minute written: added at the next round.
	save(4, m0.Add(30*time.Second), 4000)
	clk.Advance(instanceMinutesEvery + time.Second)
	save(5, m0.Add(time.Minute+imGrace+time.Second), 50000)
	if rows, calls := stored(); rows != 1 || calls != 4030 {
		t.Fatalf("after a late report: %d rows, %d calls; want the first minute's row at 4030 calls (the second minute not ended)", rows, calls)
	}
	// A read writes every sum first.
	mins, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if len(mins) != 2 || mins[0].Calls != 4030 || mins[1].Calls != 50300 {
		t.Fatalf("instance history = %+v, want minutes of 4030 and 50300 calls", mins)
	}
}

// A hello's record queued while a group's statements run joins that
// group's transaction (one COMMIT for both, not the group's and then its
// own); an op that may not join (a batch, not prompt) starts the next
// group, and the prompt ops behind it go with it, in queue order.
func TestAPromptOpQueuedWhileAGroupRunsCommitsWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := clocktest.Epoch().Truncate(time.Minute)
	hello := func(instance string) protocol.Hello {
		return protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "pay", Instance: instance,
			SDKVersion: "test", StartedAt: 7, Breakers: []protocol.BreakerConfig{{Name: "db", WindowKind: "count",
				WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 3}}}
	}

	s, release := openHeld(t, "join.db")
	done := make(chan error, 1)
	go func() { done <- s.SaveHello(ctx, hello("pay-1"), t0) }()
	eventually.True(t, "the hello queued", func() bool { return len(s.w.queue) == 1 })
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tx := s.Stats().Transactions; tx != 1 {
		t.Errorf("%d transactions, want 1 (the hello joined the running group)", tx)
	}

	s, release = openHeld(t, "carry.db")
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	queue := func(i int, f func() error) {
		go func() { errs[i] <- f() }()
		eventually.True(t, fmt.Sprintf("op %d queued", i), func() bool { return len(s.w.queue) == i+1 })
	}
	queue(0, func() error { return s.SaveHello(ctx, hello("pay-1"), t0) })
	queue(1, func() error {
		b := protocol.Batch{Seq: 1, Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli(), Millis: 1000,
			State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 3, Successes: 3}}}}
		stored, err := s.SaveBatch(ctx, "pay", "pay-1", 7, b, t0)
		if err == nil && !stored {
			err = errors.New("the batch was not stored")
		}
		return err
	})
	queue(2, func() error { return s.SaveHello(ctx, hello("pay-2"), t0) })
	release()
	for i, ch := range errs {
		if err := <-ch; err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	// Hellos and batches share a group (on PostgreSQL both take the
	// schema's lock shared).
	if s.Stats().Transactions != 2 {
		t.Errorf("%d transactions, want 2 (the held one with the first hello; the batch with the second)",
			s.Stats().Transactions)
	}
	for _, inst := range []string{"pay-1", "pay-2"} {
		if _, err := s.LastSeq(ctx, "pay", inst, 7); err != nil {
			t.Errorf("LastSeq of %s: %v", inst, err)
		}
	}
	if last, err := s.LastSeq(ctx, "pay", "pay-1", 7); err != nil || last != 1 {
		t.Errorf("LastSeq of pay-1 = %d, %v; want 1", last, err)
	}
}

// On SQLite the writer's connection keeps temporary files in memory: a
// savepoint's journal (each op of a group runs in one) holds the first
// version of every page the op changes, and once over 64 KiB (a chunk of
// a fleet-wide hold) it was written to a temporary file, a write system
// call a page.
func TestTheSQLiteWriterKeepsItsSavepointJournalInMemory(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), testDSN(t, "temp.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.w.d.postgres {
		t.Skip("SQLite's pragma")
	}
	var mode int
	if err := s.wdb.QueryRowContext(context.Background(), "PRAGMA temp_store").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != 2 {
		t.Errorf("temp_store = %d, want 2 (MEMORY)", mode)
	}
}
