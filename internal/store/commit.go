package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// A group commit, step by step (commit):
//
//  1. admit: the dry runs of Store.Probe run alone; answers to a
//     stream's failures release or skip its held batches; batches of a
//     held stream are parked (stream.go). On PostgreSQL the ops that
//     need the exclusive lock and the batches (op.shared) are two
//     groups, in that order (commitGroup each).
//  2. begin: one transaction for the group, and on PostgreSQL the
//     schema's advisory lock, shared for a group of batches, exclusive
//     for any other (dialect.beginGroup).
//  3. lockRuns: on PostgreSQL, a batch group's seq rows (instance_runs)
//     locked in one statement, in order, their last seqs read under the
//     lock (runs.go).
//  4. runOps: each op in its own savepoint; one that fails is rolled
//     back to it, told at once, and holds its stream. join: the prompt
//     ops queued meanwhile run too, and commit with the group (not an
//     op needing the exclusive lock in a group holding the shared one).
//  5. writeStaged: the rows the ops staged (windows, last seqs, seen
//     times) in multi-row statements, and, in a round (startIMRound) or
//     when an op asks, the buffered instance minutes.
//  6. commitAndMove: COMMIT (a COMMIT whose answer was lost is asked
//     about: commitLost), and once committed the instance minutes written
//     leave the writer's buffer, under the seqlock imGen.
//  7. finish: every op's outcome, counted and told (done, or its stream).
//
// A batch group that PostgreSQL ends for a deadlock or a serialization
// failure (retryable) at any step before COMMIT is rolled back and run
// again from step 2, up to maxTries times, with its ops not decided yet;
// their batches are not failed for it.

// groupTx is one group transaction of the writer: its ops in the order
// they run, each one's outcome in op.err.
type groupTx struct {
	w   *writer
	tx  *sql.Tx
	x   *wtx
	ops []*op
	// shared: a group of batches on PostgreSQL (the schema's lock in
	// shared mode). mayRetry: a retryable failure rolls the group back
	// to be run again (retry) instead of failing its ops.
	shared, mayRetry, retry bool
	// flushIM: an op asked for every buffered instance minute.
	flushIM bool
	// now is the store's clock once the ops have run.
	now time.Time
	// imWritten are the keys of the writer's buffered sums this
	// transaction wrote (to forget once committed).
	imWritten []imKey
}

// maxTries bounds the runs of one batch group that PostgreSQL ends for a
// deadlock or a serialization failure; the last one's failure fails its
// ops (a transient error: the collector stops acking until a write
// commits).
const maxTries = 5

// commit runs a group of ops in one transaction, each in its own
// savepoint, and reports every op's outcome: at once for an op that is
// not written, else after COMMIT or its failure. On PostgreSQL the
// group's ops that need the exclusive lock commit first, in queue order,
// then its batches and hellos (the lock shared), in queue order: two
// transactions, not one per change of mode (an op needing the exclusive
// lock, queued between batches, waits for the other collectors' batch
// groups). Ops of one group were queued concurrently: none waited for
// another's outcome.
func (w *writer) commit(group []*op) {
	group = w.admit(w.runDryRuns(group))
	if len(group) == 0 {
		return
	}
	if !w.d.postgres {
		w.commitGroup(group, false)
		return
	}
	var shared, exclusive []*op
	for _, o := range group {
		if o.shared {
			shared = append(shared, o)
		} else {
			exclusive = append(exclusive, o)
		}
	}
	w.commitGroup(exclusive, false)
	w.commitGroup(shared, true)
}

// commitGroup runs ops as one group transaction (see commit), again
// while PostgreSQL ends a batch group for a deadlock (up to maxTries).
func (w *writer) commitGroup(ops []*op, shared bool) {
	for try := 1; len(ops) > 0; try++ {
		g := &groupTx{w: w, ops: ops, shared: shared, mayRetry: shared && w.d.postgres && try < maxTries}
		if g.run() {
			return
		}
		w.retries.Add(1)
		ops = w.forRetry(g.ops)
	}
}

// run runs the group's transaction and hands out its ops' outcomes
// (finish); false when it was rolled back to be run again (retry).
func (g *groupTx) run() bool {
	w := g.w
	if err := g.begin(); err != nil {
		if g.mayRetry && retryable(err) {
			return false
		}
		g.failAll(fmt.Errorf("store: begin: %w", err))
		w.finish(g.ops, false)
		return true
	}
	g.runOps()
	g.join()
	g.writeStaged()
	g.x.close()
	defer w.prepare(g.x.unprepared)
	if w.testBeforeCommit != nil {
		w.testBeforeCommit(g.shared)
	}
	if g.retry {
		g.tx.Rollback()
		w.c.reset()
		return false
	}
	committed := g.commitAndMove()
	if cap(g.x.im) <= maxIMBuf {
		w.imBuf = g.x.im[:0]
	}
	w.finish(g.ops, committed && !g.x.dirty)
	return true
}

// forRetry returns the ops of a rolled-back group to run again: those not
// decided (no outcome, or the retryable failure). The others, which
// failed for their own sake and were told so, are finished now.
func (w *writer) forRetry(ops []*op) []*op {
	again := make([]*op, 0, len(ops))
	var decided []*op
	for _, o := range ops {
		switch {
		case o.err == nil, retryable(o.err) && !o.told:
			o.err, o.stored = nil, false
			again = append(again, o)
		default:
			decided = append(decided, o)
		}
	}
	if len(decided) > 0 {
		w.finish(decided, false)
	}
	return again
}

// runDryRuns runs the dry-run ops of group (Store.Probe's) each alone
// (dryRun) and returns the others, in order.
func (w *writer) runDryRuns(group []*op) []*op {
	for i, o := range group {
		if !o.dryRun {
			continue
		}
		rest := make([]*op, 0, len(group)-1)
		for _, o := range group[i:] {
			if o.dryRun {
				w.dryRun(o)
			} else {
				rest = append(rest, o)
			}
		}
		return append(group[:i:i], rest...)
	}
	return group
}

// begin opens the group's transaction.
func (g *groupTx) begin() error {
	ctx := context.Background() // ops are bounded by their own size, not by a caller
	tx, err := g.w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	x := newWtx(ctx, g.w, tx)
	x.shared = g.shared
	if err := g.w.d.beginGroup(x); err != nil {
		x.close()
		tx.Rollback()
		return err
	}
	g.tx, g.x = tx, x
	return nil
}

// runOps runs the group's ops in order, each in its own savepoint. A
// batch of a stream that a failure earlier in the group holds is parked
// (see Stream) and leaves the group. Once the transaction is broken (a
// savepoint could not be rolled back or released) nothing more runs.
func (g *groupTx) runOps() {
	if g.shared {
		g.check(g.x.lockRuns(g.ops))
	}
	kept := g.ops[:0]
	for i, o := range g.ops {
		if g.x.broken != nil || g.retry {
			kept = append(kept, g.ops[i:]...)
			break
		}
		if o.err == nil && o.stream != nil && o.stream.unanswered > 0 {
			g.w.park(o)
			continue
		}
		kept = append(kept, o)
		g.runOp(o)
		g.flushIM = g.flushIM || o.flushIM
	}
	g.ops = kept
}

// join runs in the group's transaction, each in its savepoint, the
// prompt ops (a hello's record, a chunk of a hold: someone waits for
// each) queued while the group's ops ran: they commit with the group
// instead of waiting for its COMMIT and then for their own. A hello
// queued behind a chunk of a fleet-wide hold (milliseconds of statements,
// tens on a busy machine) waited for both. It takes only the ops queued
// when it starts, in order, up to maxGroup, so that the group's own ops
// do not wait for a stream of newcomers; the first that is not prompt
// (or is a dry run, which runs alone) starts the next group (next).
//
// On PostgreSQL a group's two transactions each join (commit): once one
// has left an op in next, the other takes none (it would replace it).
func (g *groupTx) join() {
	w := g.w
	if w.next != nil {
		return
	}
	for n := len(w.queue); n > 0 && len(g.ops) < w.maxGroup && g.x.broken == nil && !g.retry; n-- {
		o := <-w.queue // only the writer goroutine receives: n are there
		if !o.prompt || o.dryRun || o.stream != nil || o.answers != nil || g.shared && !o.shared {
			w.next = o
			return
		}
		g.ops = append(g.ops, o)
		g.runOp(o)
	}
}

// runOp runs o in its savepoint unless its outcome is decided already
// (ErrSkipped). An op that is not written is told so now, whatever the
// transaction does: a batch's stream then holds its later batches.
func (g *groupTx) runOp(o *op) {
	x := g.x
	if o.err == nil {
		cut := x.imCut
		if o.err = x.savepoint(o.run); o.err != nil {
			x.imCut = cut // its savepoint is rolled back: its DELETE too
		}
	}
	if o.err != nil && g.mayRetry && retryable(o.err) {
		g.retry = true // the whole group runs again: not told
		return
	}
	if o.err != nil {
		g.w.tell(o)
	}
}

// check takes the error of a step of the group outside the ops (nil:
// none): retryable, the group runs again; otherwise it breaks the
// transaction (every op fails with it).
func (g *groupTx) check(err error) {
	switch {
	case err == nil:
	case g.mayRetry && retryable(err):
		g.retry = true
	default:
		g.x.broken = err
	}
}

// writeStaged writes what the ops staged for the whole group (the
// windows' rows, the last seqs and seen times: wtx.flush) and, during a
// round or when an op asked, the buffered instance minutes. A failure,
// or a broken transaction, fails every op.
func (g *groupTx) writeStaged() {
	w, x := g.w, g.x
	g.now = w.clock.Now()
	w.startIMRound(g.now)
	if g.retry {
		return
	}
	if x.broken != nil {
		g.failAll(x.broken)
		return
	}
	if err := x.flush(); err != nil {
		if g.mayRetry && retryable(err) {
			g.retry = true
			return
		}
		g.failAll(fmt.Errorf("store: write windows: %w", err))
		return
	}
	// A round's rows go with a batch group on PostgreSQL, not with an
	// exclusive one (thousands of upserts while every other collector's
	// batches wait).
	if !g.flushIM && (!w.imFlushing || w.d.postgres && !g.shared) {
		return
	}
	written, err := x.writeInstanceMinutes(g.flushIM, g.now.UnixMilli())
	if err != nil && g.mayRetry && retryable(err) {
		g.retry = true
		return
	}
	if err != nil {
		g.failAll(fmt.Errorf("store: write instance minutes: %w", err))
		return
	}
	g.imWritten = written
}

// commitAndMove commits the transaction and, once it has, keeps what it
// committed in the writer's caches and buffers (keep). Sums leaving the
// buffered instance minutes for the table must be counted once by a
// reader merging the two (InstanceHistory): imGen is odd from before the
// COMMIT until they have left the buffer (a seqlock), so a read that saw
// it even and the same before and after it read saw none of this move.
// Readers never wait for the commit.
func (g *groupTx) commitAndMove() bool {
	moving := len(g.imWritten) > 0
	if moving {
		g.w.imGen.Add(1)
		defer g.w.imGen.Add(1)
	}
	committed := g.commit()
	if committed {
		g.keep()
	}
	return committed
}

// commit commits the transaction when any op is to be written; otherwise,
// or when COMMIT fails, it rolls it back and fails every op.
func (g *groupTx) commit() bool {
	if g.anyWritten() {
		err := g.tx.Commit()
		if err == nil || g.w.commitLost(err, g.x.txid) {
			g.w.txs.Add(1)
			return true
		}
		g.failAll(fmt.Errorf("store: commit: %w", err))
	}
	g.tx.Rollback()
	return false
}

// keep applies a committed transaction to the writer: its rows and
// seen times to the caches (unless a savepoint was rolled back: they may
// then name rows that do not exist), and its instance minutes to the
// buffer (moveIM, endIMRound).
func (g *groupTx) keep() {
	w, x := g.w, g.x
	if !x.dirty {
		w.c.keepRows(x.rows)
		for id, at := range x.seen {
			w.c.seen[id] = at
		}
	}
	if len(g.imWritten) > 0 && w.testIMCommitted != nil {
		w.testIMCommitted()
	}
	w.moveIM(g.imWritten, x.im, x.imCut)
	w.endIMRound(g.flushIM, len(g.imWritten), x.imCut, g.now)
}

func (g *groupTx) failAll(err error) {
	for _, o := range g.ops {
		if o.err == nil {
			o.err = err
		}
	}
}

// anyWritten reports whether an op of the group is to be written.
func (g *groupTx) anyWritten() bool {
	for _, o := range g.ops {
		if o.err == nil {
			return true
		}
	}
	return false
}

// commitLost reports whether a COMMIT that failed with err committed all
// the same: the server says so (committedAfterAll), only its answer was
// lost (the connection failed at that moment). Carrying on as if it had
// failed would write the instance minutes of the transaction again and
// lose its own.
func (w *writer) commitLost(err error, txid int64) bool {
	if !w.committedAfterAll(txid) {
		return false
	}
	w.log.Warn("store: the answer to a COMMIT was lost; the server says the transaction committed", "err", err)
	return true
}

// startIMRound starts, every instanceMinutesEvery, a round of writing
// the buffered instance minutes whose minute has ended (imDue): imFlushRows
// of them a transaction until the round's are written; what arrives
// meanwhile waits for the next round.
func (w *writer) startIMRound(now time.Time) {
	if w.imFlushing || now.Sub(w.imAt) < instanceMinutesEvery || len(w.im) == 0 {
		return
	}
	w.imAt = now
	if n := imDueCount(w.im, now.UnixMilli()); n > 0 {
		w.imFlushing, w.imRound = true, n
	}
}

// moveIM updates the buffered instance minutes after a commit: the
// written keys leave (only once their row is in the table:
// FleetNotClosed relies on it), the transaction's own shares join
// (emptied when written), and the minutes before cut, which the
// retention deleted from the table (0: none), leave too.
func (w *writer) moveIM(written []imKey, own []imDelta, cut int64) {
	w.imMu.Lock()
	defer w.imMu.Unlock()
	for _, k := range written {
		delete(w.im, k)
	}
	for _, d := range own {
		addInto(w.im, d.k, d.r)
	}
	if cut != 0 {
		for k := range w.im {
			if k.minute < cut {
				delete(w.im, k)
			}
		}
	}
}

// endIMRound counts the written sums against the round, which ends
// when they are all written or when all were (an op's flush: then the
// next round is instanceMinutesEvery after now). The retention (cut) may
// have dropped sums of the round with their minutes: then what is left
// of it is counted again.
func (w *writer) endIMRound(all bool, written int, cut int64, now time.Time) {
	if w.imRound -= written; all || w.imRound <= 0 {
		w.imFlushing = false
	}
	if cut != 0 && w.imFlushing {
		if w.imRound = imDueCount(w.im, now.UnixMilli()); w.imRound <= 0 {
			w.imFlushing = false
		}
	}
	if all {
		w.imAt = now
	}
}

// finish hands every op its outcome (op.err): counted, noted for
// Writable, and told (to done, or to the op's stream); when the caches
// may hold ids or states of rolled-back rows they are dropped.
func (w *writer) finish(ops []*op, cacheOK bool) {
	if !cacheOK {
		w.c.reset()
	}
	for _, o := range ops {
		w.count(o)
		switch {
		case o.stream != nil:
			w.tell(o)
		case o.done != nil:
			o.done <- o.err
		case o.err != nil:
			w.log.Error("store: background write failed", "err", o.err)
		}
	}
}

// count counts o's outcome for Stats, and remembers a write that failed
// for the database's sake until one commits (Writable); a probe's
// success says nothing of the writes before it.
func (w *writer) count(o *op) {
	switch {
	case o.err == nil:
		w.ops.Add(1)
	case errors.Is(o.err, ErrSkipped):
		w.skipped.Add(1) // not tried: neither done nor failed
	default:
		w.failed.Add(1)
	}
	switch {
	case o.err != nil && storageError(o.err):
		w.setFailing(o.err)
	case o.err == nil && !o.probe:
		w.setFailing(nil)
	}
}

func (w *writer) setFailing(err error) {
	w.failMu.Lock()
	w.failing = err
	w.failMu.Unlock()
}
