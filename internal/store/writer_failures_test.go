package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The group write path (staged seqs, lazy savepoints, row
// cache): failures at the end of a group, several stores on one
// PostgreSQL schema, compaction and retention between groups.

func rvOpen(t *testing.T, dsn string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rvExec runs statements on the writer's own database handle, behind the
// writer's back (it is idle between the test's calls).
func rvExec(t *testing.T, s *Store, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := s.w.db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// rvBatch is one window report of n calls into the second at.
func rvBatch(seq uint64, at time.Time, n int64) protocol.Batch {
	return protocol.Batch{Seq: seq, Windows: []protocol.Window{{Breaker: "db", Start: at.UnixMilli(), Millis: 1000,
		State: protocol.StateClosed, Counts: protocol.Counts{Admitted: n, Successes: n}}}}
}

// rvCalls is the admitted calls stored in table's row of second at (0 when
// there is none).
func rvCalls(t *testing.T, s *Store, table string, at time.Time) int64 {
	t.Helper()
	var n int64
	if err := s.rdb.QueryRowContext(context.Background(), "SELECT coalesce(sum(admitted), 0) FROM "+table+" WHERE start = $1",
		at.UnixMilli()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type rvResult struct {
	stored bool
	err    error
}

// rvGroup runs saves in one group transaction: the writer is held in a
// transaction until every save is queued behind it.
func rvGroup(t *testing.T, s *Store, saves ...func() (bool, error)) []rvResult {
	t.Helper()
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.w.do(ctx, &op{run: func(*wtx) error {
			close(entered)
			<-release
			return nil
		}})
	}()
	<-entered
	chans := make([]chan rvResult, len(saves))
	for i, f := range saves {
		chans[i] = make(chan rvResult, 1)
		go func() {
			stored, err := f()
			chans[i] <- rvResult{stored, err}
		}()
		eventually.True(t, fmt.Sprintf("save %d queued", i), func() bool { return len(s.w.queue) == i+1 })
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holding op: %v", err)
	}
	out := make([]rvResult, len(saves))
	for i, ch := range chans {
		out[i] = <-ch
	}
	return out
}

func rvSave(s *Store, inst string, b protocol.Batch, at time.Time) func() (bool, error) {
	return func() (bool, error) { return s.SaveBatch(context.Background(), "pay", inst, 1, b, at) }
}

func rvMustSave(t *testing.T, s *Store, inst string, b protocol.Batch, at time.Time, want bool) {
	t.Helper()
	stored, err := s.SaveBatch(context.Background(), "pay", inst, 1, b, at)
	if err != nil || stored != want {
		t.Fatalf("%s seq %d: stored %v, %v; want %v, nil", inst, b.Seq, stored, err, want)
	}
}

func rvLastSeq(t *testing.T, s *Store, inst string, want uint64) {
	t.Helper()
	if got, err := s.LastSeq(context.Background(), "pay", inst, 1); err != nil || got != want {
		t.Errorf("LastSeq(%s) = %d, %v; want %d", inst, got, err, want)
	}
}

// rvFailSeq13 makes every write of last_seq 13 into instance_runs fail:
// at the statement (deferred false: the group's flush fails) or at COMMIT
// (deferred true; SQLite: a deferred foreign key left violated).
func rvFailSeq13(t *testing.T, s *Store, deferred bool) (drop func()) {
	t.Helper()
	switch {
	case s.w.d.postgres:
		rvExec(t, s, `CREATE FUNCTION rv_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$`)
		if deferred {
			rvExec(t, s, `CREATE CONSTRAINT TRIGGER rv_fail AFTER INSERT OR UPDATE ON instance_runs DEFERRABLE INITIALLY DEFERRED
				FOR EACH ROW WHEN (NEW.last_seq = 13) EXECUTE FUNCTION rv_fail()`)
		} else {
			rvExec(t, s, `CREATE TRIGGER rv_fail BEFORE INSERT OR UPDATE ON instance_runs
				FOR EACH ROW WHEN (NEW.last_seq = 13) EXECUTE FUNCTION rv_fail()`)
		}
		return func() { rvExec(t, s, `DROP TRIGGER rv_fail ON instance_runs`, `DROP FUNCTION rv_fail()`) }
	case deferred:
		rvExec(t, s, `CREATE TABLE rv_parent (id INTEGER PRIMARY KEY)`,
			`CREATE TABLE rv_child (p INTEGER REFERENCES rv_parent(id) DEFERRABLE INITIALLY DEFERRED)`,
			`CREATE TRIGGER rv_fail_i AFTER INSERT ON instance_runs WHEN NEW.last_seq = 13 BEGIN INSERT INTO rv_child VALUES (42); END`,
			`CREATE TRIGGER rv_fail_u AFTER UPDATE ON instance_runs WHEN NEW.last_seq = 13 BEGIN INSERT INTO rv_child VALUES (42); END`)
		return func() {
			rvExec(t, s, `DROP TRIGGER rv_fail_i`, `DROP TRIGGER rv_fail_u`, `DROP TABLE rv_child`, `DROP TABLE rv_parent`)
		}
	default:
		rvExec(t, s, `CREATE TRIGGER rv_fail_i BEFORE INSERT ON instance_runs WHEN NEW.last_seq = 13 BEGIN SELECT RAISE(ABORT, 'injected failure'); END`,
			`CREATE TRIGGER rv_fail_u BEFORE UPDATE ON instance_runs WHEN NEW.last_seq = 13 BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
		return func() { rvExec(t, s, `DROP TRIGGER rv_fail_i`, `DROP TRIGGER rv_fail_u`) }
	}
}

// A group whose end fails (its flush of the staged seqs, or its COMMIT)
// after its batches staged seqs and rows into a second the row cache
// holds: no batch of the group is acknowledged, nothing of it is stored,
// the caches forget what it staged (the resends are stored, each once,
// and the second's sum reads the table, not the rolled-back row).
func TestAGroupWhoseEndFailsStoresNothingAndForgetsItsRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		deferred bool
	}{{"flush", false}, {"commit", true}} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testDSN(t, "end.db")
			s := rvOpen(t, dsn, Options{})
			t0 := clocktest.Epoch().Truncate(time.Minute)
			// The second is committed once, so the row cache holds it.
			rvMustSave(t, s, "pay-a", rvBatch(1, t0, 10), t0, true)
			rvMustSave(t, s, "pay-b", rvBatch(12, t0, 1000), t0, true)
			drop := rvFailSeq13(t, s, c.deferred)
			res := rvGroup(t, s,
				rvSave(s, "pay-a", rvBatch(2, t0, 20), t0),
				rvSave(s, "pay-b", rvBatch(13, t0, 300), t0))
			for i, r := range res {
				if r.err == nil || r.stored {
					t.Errorf("save %d of the failed group = %v, %v; want an error", i, r.stored, r.err)
				}
			}
			t.Logf("the failed group's error: %v", res[1].err)
			if got := rvCalls(t, s, "windows_second", t0); got != 1010 {
				t.Errorf("after the failed group the second holds %d calls, want 1010", got)
			}
			rvLastSeq(t, s, "pay-a", 1)
			rvLastSeq(t, s, "pay-b", 12)
			drop()
			// The agents resend what was not acknowledged.
			rvMustSave(t, s, "pay-a", rvBatch(2, t0, 20), t0, true)
			rvMustSave(t, s, "pay-b", rvBatch(13, t0, 300), t0, true)
			rvMustSave(t, s, "pay-a", rvBatch(2, t0, 20), t0, false)
			rvMustSave(t, s, "pay-b", rvBatch(13, t0, 300), t0, false)
			rvMustSave(t, s, "pay-a", rvBatch(3, t0, 4), t0, true)
			if got := rvCalls(t, s, "windows_second", t0); got != 1334 {
				t.Errorf("the second holds %d calls, want 1334 (10+1000+20+300+4, each batch once)", got)
			}
			rvLastSeq(t, s, "pay-a", 3)
			rvLastSeq(t, s, "pay-b", 13)
			// Reopened (no caches): the same.
			s.Close()
			s = rvOpen(t, dsn, Options{})
			if got := rvCalls(t, s, "windows_second", t0); got != 1334 {
				t.Errorf("reopened: the second holds %d calls, want 1334", got)
			}
			rvMustSave(t, s, "pay-b", rvBatch(13, t0, 300), t0, false)
		})
	}
}

// Two stores on one PostgreSQL schema (two collectors) write the same
// dependency-second in turn, and one agent process's batches arrive at
// either: the second's sum counts both stores' rows (each writes its
// own), and neither store's cache hides the other's batches (seqs are
// read under their rows' lock).
func TestTwoStoresOnOnePostgreSQLTakeTurnsOnOneSecond(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t, "two.db")
	a := rvOpen(t, dsn, Options{})
	if !a.w.d.postgres {
		t.Skip("PostgreSQL only: a SQLite file has one server")
	}
	b := rvOpen(t, dsn, Options{})
	t0 := clocktest.Epoch().Truncate(time.Minute)
	want := int64(0)
	for i, st := range []*Store{a, b, a, b, a, a, b, b} {
		seq := uint64(i + 1)
		n := int64(1) << i
		rvMustSave(t, st, "pay-1", rvBatch(seq, t0, n), t0, true)
		want += n
		// The resend through the other store is a duplicate, and so is
		// the one through the same store.
		other := a
		if st == a {
			other = b
		}
		rvMustSave(t, other, "pay-1", rvBatch(seq, t0, n), t0, false)
		rvMustSave(t, st, "pay-1", rvBatch(seq, t0, n), t0, false)
		if got := rvCalls(t, a, "windows_second", t0); got != want {
			t.Fatalf("after batch %d the second holds %d calls, want %d", seq, got, want)
		}
	}
	// The same within groups: a batch staged in a's group while b's cache
	// holds the seq before it.
	res := rvGroup(t, a, rvSave(a, "pay-1", rvBatch(9, t0, 1000), t0), rvSave(a, "pay-1", rvBatch(9, t0, 1000), t0))
	if res[0] != (rvResult{true, nil}) || res[1] != (rvResult{false, nil}) {
		t.Fatalf("a's group = %+v; want stored, duplicate", res)
	}
	res = rvGroup(t, b, rvSave(b, "pay-1", rvBatch(9, t0, 1000), t0), rvSave(b, "pay-1", rvBatch(10, t0, 2000), t0))
	if res[0] != (rvResult{false, nil}) || res[1] != (rvResult{true, nil}) {
		t.Fatalf("b's group = %+v; want duplicate, stored", res)
	}
	want += 3000
	if got := rvCalls(t, b, "windows_second", t0); got != want {
		t.Fatalf("the second holds %d calls, want %d", got, want)
	}
	rvLastSeq(t, a, "pay-1", 10)
}

// Compaction between groups, with the second in the row cache: a batch
// into a second already rolled up counts in the second and its minute;
// once retention deletes the second, a later batch into it starts a new
// row (the cache does not bring the deleted one back) and still counts in
// the minute.
func TestLateBatchesIntoARolledUpAndThenExpiredSecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := clocktest.Epoch().Truncate(time.Minute)
	t.Run("rolled up", func(t *testing.T) {
		s := rvOpen(t, testDSN(t, "late.db"), Options{})
		rvMustSave(t, s, "pay-1", rvBatch(1, t0, 10), t0, true)
		if err := s.Compact(ctx, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got := rvCalls(t, s, "windows_minute", t0); got != 10 {
			t.Fatalf("rolled up: the minute holds %d calls, want 10", got)
		}
		rvMustSave(t, s, "pay-1", rvBatch(2, t0, 5), t0, true)
		if sec, min := rvCalls(t, s, "windows_second", t0), rvCalls(t, s, "windows_minute", t0); sec != 15 || min != 15 {
			t.Fatalf("late batch: second %d, minute %d calls; want 15, 15", sec, min)
		}
	})
	t.Run("rolled up and expired", func(t *testing.T) {
		// Seconds kept 1 ms: deleted as soon as rolled up, while the row
		// cache still holds the second (the newest one it has).
		s := rvOpen(t, testDSN(t, "expired.db"), Options{Retention: Retention{Seconds: time.Millisecond}})
		rvMustSave(t, s, "pay-1", rvBatch(1, t0, 10), t0, true)
		if err := s.Compact(ctx, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if sec, min := rvCalls(t, s, "windows_second", t0), rvCalls(t, s, "windows_minute", t0); sec != 0 || min != 10 {
			t.Fatalf("compacted: second %d, minute %d calls; want 0 (deleted), 10", sec, min)
		}
		rvMustSave(t, s, "pay-1", rvBatch(2, t0, 7), t0, true)
		if sec, min := rvCalls(t, s, "windows_second", t0), rvCalls(t, s, "windows_minute", t0); sec != 7 || min != 17 {
			t.Fatalf("late batch: second %d, minute %d calls; want 7 (a new row), 17", sec, min)
		}
	})
}

// An op whose first statement fails (its savepoint opened by that
// statement), between ops that staged rows, on an instance whose seq and
// breakers are cached: the others are stored, the failed one is not and
// its resend is stored once. On PostgreSQL a failed statement outside a
// savepoint would abort the whole transaction.
func TestAnOpWhoseFirstStatementFailsAmongStagedOps(t *testing.T) {
	t.Parallel()
	s := rvOpen(t, testDSN(t, "first.db"), Options{})
	t0 := clocktest.Epoch().Truncate(time.Minute)
	rvMustSave(t, s, "pay-a", rvBatch(1, t0, 1), t0, true)
	rvMustSave(t, s, "pay-c", rvBatch(1, t0, 2), t0, true)
	if s.w.d.postgres {
		rvExec(t, s, `CREATE FUNCTION rv_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$`,
			`CREATE TRIGGER rv_boom BEFORE INSERT ON transitions FOR EACH ROW WHEN (NEW.breaker = 'boom') EXECUTE FUNCTION rv_boom()`)
	} else {
		rvExec(t, s, `CREATE TRIGGER rv_boom BEFORE INSERT ON transitions WHEN NEW.breaker = 'boom' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
	}
	boom := rvBatch(2, t0, 40)
	boom.Transitions = []protocol.Transition{{Breaker: "boom", From: protocol.StateClosed, To: protocol.StateOpen, At: t0.UnixMilli(), Generation: 1}}
	res := rvGroup(t, s,
		rvSave(s, "pay-a", rvBatch(2, t0, 10), t0),
		rvSave(s, "pay-c", boom, t0),
		rvSave(s, "pay-a", rvBatch(3, t0, 100), t0),
		rvSave(s, "pay-c", boom, t0))
	if res[0] != (rvResult{true, nil}) || res[2] != (rvResult{true, nil}) || res[1].err == nil || res[3].err == nil {
		t.Fatalf("group = %+v; want stored, error, stored, error", res)
	}
	if got := rvCalls(t, s, "windows_second", t0); got != 113 {
		t.Fatalf("the second holds %d calls, want 113", got)
	}
	if s.w.d.postgres {
		rvExec(t, s, `DROP TRIGGER rv_boom ON transitions`)
	} else {
		rvExec(t, s, `DROP TRIGGER rv_boom`)
	}
	rvMustSave(t, s, "pay-c", boom, t0, true)
	rvMustSave(t, s, "pay-c", boom, t0, false)
	if got := rvCalls(t, s, "windows_second", t0); got != 153 {
		t.Fatalf("the second holds %d calls, want 153", got)
	}
	rvLastSeq(t, s, "pay-a", 3)
	rvLastSeq(t, s, "pay-c", 2)
}

// A window a few minutes ahead (protocol.MaxFutureSkewMillis lets a
// window start up to 5 minutes after its batch's sent_at, and the
// collector's skew correction goes by sent_at) must not keep the row
// cache from holding the seconds of everyone else's reports.
func TestAWindowAheadDoesNotEmptyTheRowCache(t *testing.T) {
	t.Parallel()
	s := rvOpen(t, testDSN(t, "ahead.db"), Options{})
	t0 := clocktest.Epoch().Truncate(time.Minute)
	rvMustSave(t, s, "pay-1", rvBatch(1, t0, 1), t0, true)
	if len(s.w.c.rows) != 1 {
		t.Fatalf("%d cached rows after one second, want 1", len(s.w.c.rows))
	}
	rvMustSave(t, s, "pay-2", rvBatch(1, t0.Add(4*time.Minute), 1), t0, true)
	for i := range 5 {
		at := t0.Add(time.Duration(i+1) * time.Second)
		rvMustSave(t, s, "pay-1", rvBatch(uint64(i+2), at, 1), at, true)
	}
	if _, ok := s.w.c.rows[bucketKey{1, t0.Add(5 * time.Second).UnixMilli()}]; !ok {
		t.Errorf("the newest second is not cached after a window 4 minutes ahead (cache holds %d rows)", len(s.w.c.rows))
	}
}

// One instance minute in the writer's buffered sums and in the group's
// own shares, written together (an instance-history read flushes them):
// two statements, since PostgreSQL refuses an upsert that touches a row
// twice; and a hello that forgets the batch's breaker in the same group.
func TestAGroupWritesOneInstanceMinuteFromBothSumsAndAHelloForgetsABreaker(t *testing.T) {
	t.Parallel()
	s := rvOpen(t, testDSN(t, "im.db"), Options{})
	ctx := context.Background()
	t0 := clocktest.Epoch().Truncate(time.Minute)
	hello := func(breakers ...string) protocol.Hello {
		h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "pay", Instance: "pay-1", StartedAt: 1}
		for _, b := range breakers {
			h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: b})
		}
		return h
	}
	if err := s.SaveHello(ctx, hello("db", "cache"), t0); err != nil {
		t.Fatal(err)
	}
	rvMustSave(t, s, "pay-1", rvBatch(1, t0, 10), t0, true) // buffered by the writer
	open := rvBatch(2, t0.Add(time.Second), 20)
	open.Windows[0].State = protocol.StateOpen
	res := rvGroup(t, s,
		rvSave(s, "pay-1", open, t0),
		func() (bool, error) { return false, s.SaveHello(ctx, hello("cache"), t0) }, // forgets db
		func() (bool, error) { return false, s.flushInstanceMinutes(ctx) },
		rvSave(s, "pay-1", rvBatch(3, t0.Add(2*time.Second), 40), t0))
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("op %d of the group: %v", i, r.err)
		}
	}
	if calls := rvInstanceCalls(t, s, t0); calls != 70 {
		t.Errorf("the instance minute counts %d calls, want 70", calls)
	}
	var state string
	if err := s.rdb.QueryRowContext(ctx, "SELECT b.state FROM breakers b JOIN instances i ON i.id = b.instance_id WHERE i.name = 'pay-1' AND b.name = 'db'").Scan(&state); err != nil {
		t.Fatalf("the breaker db, reported after the hello that forgot it: %v", err)
	}
	if state != protocol.StateClosed {
		t.Errorf("breaker db is %q, want closed (its last report)", state)
	}
	rvLastSeq(t, s, "pay-1", 3)
}

// The writer reads no row of a second it knows it never wrote (its row
// cache holds every row of its own from a bound on: rowAbsent), and
// reads every other one: after its caches are dropped (an op failed), a
// report into a second it wrote before the drop adds to the stored row;
// a new second after the drop is stored as reported; and on SQLite a
// store opened again on the file adds to the last run's rows.
func TestAWriterAddsToTheSecondsItWroteBeforeItsCachesWereDropped(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t, "absent.db")
	s := rvOpen(t, dsn, Options{})
	ctx := context.Background()
	s1, s2, s3 := b0, b0.Add(time.Second), b0.Add(2*time.Second)
	for i, w := range []struct {
		at time.Time
		n  int64
	}{{s1, 5}, {s2, 3}} {
		if ok, err := rvSaveAt(ctx, s, "pay-1", rvBatch(uint64(i+1), w.at, w.n)); err != nil || !ok {
			t.Fatalf("batch %d: %v, %v", i+1, ok, err)
		}
	}
	// An op that fails: its savepoint is rolled back, the caches dropped.
	if err := s.w.do(ctx, &op{run: func(*wtx) error { return errors.New("an op that fails") }}); err == nil {
		t.Fatal("the failing op did not fail")
	}
	for i, w := range []struct {
		at time.Time
		n  int64
	}{{s1, 2}, {s3, 4}, {s2, 1}} {
		if ok, err := rvSaveAt(ctx, s, "pay-1", rvBatch(uint64(i+3), w.at, w.n)); err != nil || !ok {
			t.Fatalf("batch %d: %v, %v", i+3, ok, err)
		}
	}
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{s1, 7}, {s2, 4}, {s3, 4}} {
		if n := rvCalls(t, s, "windows_second", c.at); n != c.want {
			t.Errorf("second %s holds %d calls, want %d", c.at.Format(time.TimeOnly), n, c.want)
		}
	}
	if s.w.d.postgres {
		return
	}
	// SQLite: one writer id (0) for every run on the file.
	s.Close()
	s = rvOpen(t, dsn, Options{})
	if ok, err := rvSaveAt(ctx, s, "pay-1", rvBatch(6, s3, 10)); err != nil || !ok {
		t.Fatalf("batch after reopening: %v, %v", ok, err)
	}
	if n := rvCalls(t, s, "windows_second", s3); n != 14 {
		t.Errorf("after reopening, second %s holds %d calls, want 14", s3.Format(time.TimeOnly), n)
	}
}
