package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// Several writers on one PostgreSQL schema (issue 36): batch groups hold
// the schema's lock shared and write history rows of their own writer.

// pgWriters opens n stores on one new PostgreSQL schema (n collectors),
// or skips the test on SQLite.
func pgWriters(t *testing.T, n int) ([]*Store, string) {
	t.Helper()
	dsn := testDSN(t, "writers.db")
	first := rvOpen(t, dsn, Options{})
	if !first.w.d.postgres {
		t.Skip("PostgreSQL only: a SQLite file has one writer")
	}
	out := []*Store{first}
	for len(out) < n {
		out = append(out, rvOpen(t, dsn, Options{}))
	}
	return out, dsn
}

// holdBatchGroup makes s's writer stop in its next batch group, with its
// statements run and before its COMMIT: entered is closed then, and the
// group commits once release is called.
func holdBatchGroup(t *testing.T, s *Store) (entered <-chan struct{}, release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	s.w.testBeforeCommit = func(shared bool) {
		if shared {
			once.Do(func() {
				close(in)
				<-out
			})
		}
	}
	release = func() { rel.Do(func() { close(out) }) }
	t.Cleanup(release)
	return in, release
}

// writerPID is the server process of s's writer's one connection (asked
// on it: call it while the writer is idle).
func writerPID(t *testing.T, s *Store) int64 {
	t.Helper()
	var pid int64
	if err := s.w.db.QueryRowContext(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// pidWaits reports whether server process pid waits for a lock (pg_locks,
// granted false), asked through s's read pool.
func pidWaits(t *testing.T, s *Store, pid int64) bool {
	t.Helper()
	var n int
	if err := s.rdb.QueryRowContext(context.Background(), "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func rvSaveAt(ctx context.Context, s *Store, inst string, b protocol.Batch) (bool, error) {
	return s.SaveBatch(ctx, "pay", inst, 1, b, b0)
}

var b0 = clocktest.Epoch().Truncate(time.Hour)

// Two writers' batches of other instances into the same dependency and
// seconds, at the same time: History at second level is their sum (in
// flight and open instances too), the minute after compaction as well,
// and a late second after the compaction counts in its minute.
func TestTwoWritersReportIntoTheSameSecondsAtOnce(t *testing.T) {
	t.Parallel()
	st, _ := pgWriters(t, 2)
	ctx := context.Background()
	const seconds = 20
	var wg sync.WaitGroup
	for i, s := range st {
		for n := range 3 {
			wg.Go(func() {
				inst := fmt.Sprintf("pay-%d-%d", i, n)
				for sec := range seconds {
					b := rvBatch(uint64(sec+1), b0.Add(time.Duration(sec)*time.Second), int64(10*(i+1)))
					b.Windows[0].InFlight = int64(i + 1)
					if sec%2 == 0 {
						b.Windows[0].State = protocol.StateOpen
					}
					if ok, err := rvSaveAt(ctx, s, inst, b); err != nil || !ok {
						t.Errorf("%s second %d: %v, %v", inst, sec, ok, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	q := cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "db"}, From: b0, To: b0.Add(time.Minute),
		Resolution: cbdash.ResolutionSecond}
	pts, err := st[1].History(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != seconds {
		t.Fatalf("%d seconds, want %d", len(pts), seconds)
	}
	for i, p := range pts {
		// 3 instances of 10 calls through one, 3 of 20 through the other.
		open := map[bool]int{true: 6, false: 0}[i%2 == 0]
		if p.Counts.Admitted != 90 || p.InFlight != 9 || p.Open != open || p.Reports != 6 {
			t.Fatalf("second %d: %d calls, %d in flight, %d open, %d reports; want 90, 9, %d, 6", i, p.Counts.Admitted, p.InFlight, p.Open, p.Reports, open)
		}
	}
	if err := st[0].Compact(ctx, b0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	q.Resolution = cbdash.ResolutionMinute
	minute := func(when string, calls int64) {
		t.Helper()
		pts, err := st[1].History(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != 1 || pts[0].Counts.Admitted != calls || pts[0].InFlight != 9 || pts[0].Open != 6 {
			t.Fatalf("%s: minute %+v; want one of %d calls, 9 in flight, 6 open", when, pts, calls)
		}
		if n := rvCalls(t, st[0], "windows_minute", b0); n != calls {
			t.Fatalf("%s: windows_minute holds %d calls, want %d", when, n, calls)
		}
	}
	minute("compacted", 90*seconds)
	// A late report through the other writer, into a second already
	// rolled up: its own minute row, with the second's in-flight calls
	// summed over both writers' rows.
	late := rvBatch(seconds+1, b0.Add(3*time.Second), 5)
	late.Windows[0].InFlight = 1
	if ok, err := rvSaveAt(ctx, st[1], "pay-1-0", late); err != nil || !ok {
		t.Fatalf("late report: %v, %v", ok, err)
	}
	q.Resolution = cbdash.ResolutionMinute
	pts, err = st[0].History(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 1 || pts[0].Counts.Admitted != 90*seconds+5 || pts[0].InFlight != 10 {
		t.Fatalf("after the late report: minute %+v; want %d calls, 10 in flight", pts, 90*seconds+5)
	}
}

// Batch groups of two writers overlap: while one holds its group open
// (the schema's lock shared, its statements run, before COMMIT), the
// other commits batches into the same dependency-second; an op needing
// the exclusive lock (a user's creation) waits for the held group, and a
// hello, whose group takes the lock shared too, does not.
func TestBatchGroupsOfTwoWritersRunAtTheSameTime(t *testing.T) {
	t.Parallel()
	st, _ := pgWriters(t, 2)
	a, b := st[0], st[1]
	ctx := context.Background()
	// The service and the dependency exist (a writer creating one waits
	// for another's uncommitted insert of it to commit).
	for i, s := range st {
		if ok, err := rvSaveAt(ctx, s, fmt.Sprintf("pay-%d", i), rvBatch(1, b0.Add(-time.Second), 1)); err != nil || !ok {
			t.Fatalf("first batch: %v, %v", ok, err)
		}
	}
	pid := writerPID(t, b)
	entered, release := holdBatchGroup(t, a)
	held := make(chan error, 1)
	go func() {
		_, err := rvSaveAt(ctx, a, "pay-a", rvBatch(1, b0, 10))
		held <- err
	}()
	<-entered
	for seq := range uint64(3) {
		if ok, err := rvSaveAt(ctx, b, "pay-b", rvBatch(seq+1, b0, 1)); err != nil || !ok {
			t.Fatalf("b's batch %d while a's group is open: %v, %v", seq+1, ok, err)
		}
	}
	if n := rvCalls(t, b, "windows_second", b0); n != 3 {
		t.Fatalf("the second holds %d committed calls, want b's 3", n)
	}
	if err := b.SaveHello(ctx, protocol.Hello{Type: protocol.TypeHello, Service: "pay", Instance: "pay-c", StartedAt: 1}, b0); err != nil {
		t.Fatalf("b's hello while a's group is open: %v", err)
	}
	userDone := make(chan error, 1)
	go func() {
		_, err := b.CreateUser(ctx, "ann", "admin", []byte("x"))
		userDone <- err
	}()
	eventually.True(t, "b's user waiting for the exclusive lock", func() bool { return pidWaits(t, b, pid) })
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-userDone; err != nil {
		t.Fatal(err)
	}
	if n := rvCalls(t, b, "windows_second", b0); n != 13 {
		t.Fatalf("the second holds %d calls, want 13", n)
	}
}

// A fleet connecting to two collectors at once: while one writer's group
// holds the hello of a new instance of a service open (its new instance
// row, the service's last-seen time moved, before COMMIT), the other
// writer's hellos of new and known instances of the same service commit
// without waiting, and both writers' rows are stored once the held group
// commits.
func TestHellosOfTwoWritersOfOneServiceDoNotWaitOnEachOther(t *testing.T) {
	t.Parallel()
	st, _ := pgWriters(t, 2)
	a, b := st[0], st[1]
	ctx := context.Background()
	hello := func(inst string) protocol.Hello {
		return protocol.Hello{Type: protocol.TypeHello, Service: "pay", Instance: inst, StartedAt: 1,
			Breakers: []protocol.BreakerConfig{{Name: "db"}, {Name: "cache"}}}
	}
	for _, s := range st { // the service exists, and b's known instance
		if err := s.SaveHello(ctx, hello("pay-known"), b0.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := holdBatchGroup(t, a)
	held := make(chan error, 1)
	go func() { held <- a.SaveHello(ctx, hello("pay-a"), b0) }()
	<-entered
	for i, inst := range []string{"pay-b1", "pay-known", "pay-b2"} {
		done := make(chan error, 1)
		go func() { done <- b.SaveHello(ctx, hello(inst), b0.Add(time.Duration(i+1)*time.Second)) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("b's hello of %s: %v", inst, err)
			}
		case <-time.After(30 * time.Second): // a failure's bound, not a wait for time to pass
			t.Fatalf("b's hello of %s waited for a's open group", inst)
		}
	}
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	var instances, breakers int
	var seen int64
	if err := b.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM instances), (SELECT count(*) FROM breakers),
		(SELECT last_seen FROM services WHERE name = 'pay')`).Scan(&instances, &breakers, &seen); err != nil {
		t.Fatal(err)
	}
	if instances != 4 || breakers != 8 {
		t.Errorf("%d instances, %d breakers; want 4 and 8", instances, breakers)
	}
	// a's hello held the row: b skipped its moves, a's (b0) stands.
	if seen != b0.UnixMilli() {
		t.Errorf("the service was last seen at %d, want a's hello's %d", seen, b0.UnixMilli())
	}
}

// One agent process's batch in two writers' groups at once (an agent
// failing over: the old collector's queue, the new one's resend): the
// second group waits on the seq row and finds the batch stored, a
// duplicate; nothing fails.
func TestOneBatchThroughTwoWritersAtOnceIsStoredOnce(t *testing.T) {
	t.Parallel()
	st, _ := pgWriters(t, 2)
	a, b := st[0], st[1]
	ctx := context.Background()
	for _, s := range st {
		if err := s.SaveHello(ctx, protocol.Hello{Type: protocol.TypeHello, Service: "pay", Instance: "pay-1", StartedAt: 1,
			Breakers: []protocol.BreakerConfig{{Name: "db"}}}, b0); err != nil {
			t.Fatal(err)
		}
	}
	pid := writerPID(t, b)
	entered, release := holdBatchGroup(t, a)
	type res struct {
		ok  bool
		err error
	}
	ra, rb := make(chan res, 1), make(chan res, 1)
	go func() {
		ok, err := rvSaveAt(ctx, a, "pay-1", rvBatch(1, b0, 10))
		ra <- res{ok, err}
	}()
	<-entered
	go func() {
		ok, err := rvSaveAt(ctx, b, "pay-1", rvBatch(1, b0, 10))
		rb <- res{ok, err}
	}()
	eventually.True(t, "b's group waiting on the seq row a's holds", func() bool { return pidWaits(t, b, pid) })
	release()
	if r := <-ra; !r.ok || r.err != nil {
		t.Fatalf("a's batch: %+v, want stored", r)
	}
	if r := <-rb; r.ok || r.err != nil {
		t.Fatalf("b's batch: %+v, want a duplicate (false, nil)", r)
	}
	if n := rvCalls(t, a, "windows_second", b0); n != 10 {
		t.Fatalf("the second holds %d calls, want 10 (once)", n)
	}
	if err := b.Writable(ctx); err != nil {
		t.Fatalf("b after the overlap: %v", err)
	}
}

// A batch group that PostgreSQL picks as a deadlock's victim is run
// again and its batches are stored, not failed: another transaction
// holds one of the group's seq rows and then asks for one the group
// locked.
func TestABatchGroupInADeadlockRunsAgain(t *testing.T) {
	t.Parallel()
	st, dsn := pgWriters(t, 1)
	s := st[0]
	ctx := context.Background()
	ids := map[string]int64{}
	for _, inst := range []string{"pay-1", "pay-2"} {
		if err := s.SaveHello(ctx, protocol.Hello{Type: protocol.TypeHello, Service: "pay", Instance: inst, StartedAt: 1,
			Breakers: []protocol.BreakerConfig{{Name: "db"}}}, b0); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := s.rdb.QueryRowContext(ctx, "SELECT id FROM instances WHERE name = $1", inst).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[inst] = id
	}
	pid := writerPID(t, s)
	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// This transaction looks for the deadlock only after a minute, so the
	// group's (after PostgreSQL's 1 s) always finds it first and is the
	// victim, however late a busy machine runs either check.
	if _, err := tx.ExecContext(ctx, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
		t.Fatalf("deadlock_timeout (the test's role must be allowed to set it): %v", err)
	}
	lockRow := func(inst string) error {
		var seq int64
		return tx.QueryRowContext(ctx, "SELECT last_seq FROM instance_runs WHERE instance_id = $1 FOR UPDATE", ids[inst]).Scan(&seq)
	}
	// The group locks the rows in order of id, and the later one is held.
	low, high := "pay-1", "pay-2"
	if ids[high] < ids[low] {
		low, high = high, low
	}
	if err := lockRow(high); err != nil {
		t.Fatal(err)
	}
	results := make(chan []rvResult, 1)
	go func() {
		results <- rvGroup(t, s, rvSave(s, "pay-1", rvBatch(1, b0, 1), b0), rvSave(s, "pay-2", rvBatch(1, b0, 2), b0))
	}()
	eventually.True(t, "the group waiting on the row held", func() bool { return pidWaits(t, s, pid) })
	// Now this transaction waits on the group: a deadlock, which the
	// group (checking after 1 s, this one after 60 s) ends by failing.
	if err := lockRow(low); err != nil {
		t.Fatalf("the other transaction: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, r := range <-results {
		if r.err != nil || !r.stored {
			t.Fatalf("batch %d: %+v, want stored", i, r)
		}
	}
	if n := s.Stats().Retried; n == 0 {
		t.Errorf("no group was run again")
	}
	if n := rvCalls(t, s, "windows_second", b0); n != 3 {
		t.Fatalf("the second holds %d calls, want 3", n)
	}
}

// A group of an op needing the exclusive lock and a batch is two
// transactions on PostgreSQL, each of which may take ops queued while it
// ran (join): the op the first one leaves for the next group is not
// replaced by the second's, so every op queued has its outcome.
func TestOpsQueuedWhileAGroupsTwoTransactionsRunAllCommit(t *testing.T) {
	t.Parallel()
	s := rvOpen(t, testDSN(t, "join2.db"), Options{})
	release := holdWriter(t, s)
	later := []*op{{run: func(*wtx) error { return nil }, done: make(chan error, 1)},
		{run: func(*wtx) error { return nil }, done: make(chan error, 1)}}
	ctx := context.Background()
	errs := make(chan error, 2)
	go func() {
		errs <- s.w.do(ctx, &op{run: func(*wtx) error {
			for _, o := range later { // queued while the group runs
				if !s.w.try(o) {
					return fmt.Errorf("queue full")
				}
			}
			return nil
		}})
	}()
	eventually.True(t, "the exclusive op queued", func() bool { return len(s.w.queue) == 1 })
	go func() { errs <- s.w.do(ctx, &op{shared: true, run: func(*wtx) error { return nil }}) }()
	eventually.True(t, "the batch queued", func() bool { return len(s.w.queue) == 2 })
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range later {
		if err := <-o.done; err != nil {
			t.Fatalf("op %d queued during the group: %v", i, err)
		}
	}
}
