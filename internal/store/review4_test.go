package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Review of the group write path (staged seqs, lazy savepoints, row
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
	if err := s.rdb.QueryRowContext(context.Background(), "SELECT coalesce(sum(admitted), 0) FROM "+table+" WHERE start = ?",
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
func TestReviewAGroupWhoseEndFailsStoresNothingAndForgetsItsRows(t *testing.T) {
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
