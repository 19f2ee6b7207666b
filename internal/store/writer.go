package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// op is one unit of work for the writer: run executes inside the group's
// transaction (within its own savepoint) and done receives the outcome
// once the transaction has committed or failed. A nil done means nobody
// waits (fire and forget).
type op struct {
	run  func(x *wtx) error
	done chan error
	// err is the op's outcome, set by the writer goroutine: before its
	// group runs when the op is not to run (ErrSkipped), else by its run
	// or its group's failure.
	err error
	// stream, when set, is the Stream of a batch (Stream.Save): the
	// outcome goes to the stream (tell) instead of done, at once when
	// the op is not written, else after the group's COMMIT or its
	// failure. told: it was sent. stored: saveBatch wrote it (not a
	// duplicate). full: see Stream.Save.
	stream *Stream
	batch  *protocol.Batch
	stored bool
	told   bool
	full   bool
	// answers, when set, makes the op an answer to a failure of that
	// stream (Stream.Resume, or Stream.Stop when stop), applied when the
	// writer reaches it in the queue (admit); it is not run.
	answers *Stream
	stop    bool
	// probe marks Store.Writable's write: its success says nothing of the
	// writes that failed before it.
	probe bool
	// flushIM has the group write the buffered instance minutes.
	flushIM bool
	// dryRun runs the op alone in a transaction of its own, with the
	// group's flush, that is rolled back whatever happens (Store.Probe's).
	dryRun bool
	// shared: the op writes only what a batch writes (per-instance rows,
	// appended rows, additive upserts, the writer's own history rows), so
	// on PostgreSQL its group takes the schema's lock in shared mode and
	// runs beside other processes' batch groups (see doc.go, Several
	// writers); every other op takes it exclusively. inst, when set, is
	// the agent process whose batch the op writes: its seq rows are
	// locked at the group's start (lockRuns).
	shared bool
	inst   *instName
	// prompt: someone waits for this op before going on (an agent for
	// its hello's welcome, an operator for a hold): its group commits
	// what is queued without waiting for company (see waits), and it
	// joins a group whose ops are running when it is queued (join).
	prompt bool
}

// instName names the agent process of a batch.
type instName struct {
	service, instance string
	startedAt         int64
}

// writer is the single goroutine that owns every write.
type writer struct {
	db *sql.DB
	d  *dialect
	// id is the writer's id in the windows tables' rows (their writer
	// column): 0 on SQLite (one writer per file), on PostgreSQL a
	// number of the store_writers sequence taken at Open, unique among
	// the processes sharing the schema. 0 is also the roll-ups' id.
	id       int64
	log      *slog.Logger
	maxGroup int
	queue    chan *op
	quit     chan struct{} // closed by stop: accept no more ops
	stopped  chan struct{} // closed when run returns
	stopOnce sync.Once
	// qmu makes a check of quit and the send to queue one step against
	// stop's close of quit: once quit is closed nothing more is queued,
	// so the writer's last drain sees every op that was (a stream's batch
	// then always has its outcome sent).
	qmu sync.RWMutex

	// held are the streams with batches parked until their failures are
	// answered (Stream); writer goroutine only.
	held map[*Stream]struct{}
	// next is an op taken from the queue that could not join the group
	// then running (groupTx.join): it starts the next one. Writer
	// goroutine only.
	next *op
	// busy: ops came at busyRate or more in the last measured second
	// (pace); rateAt starts the second being measured, rateOps counts
	// its ops. Real time, as groupWait. Writer goroutine only.
	busy    bool
	rateAt  time.Time
	rateOps int

	// Counters for Stats.
	txs, ops, failed, skipped, dropped, retries atomic.Uint64

	// testBeforeCommit, set by tests only, is called with the group's
	// lock mode (shared: true) once its statements have run and before
	// its COMMIT.
	testBeforeCommit func(shared bool)

	// failing is the error of the last write that failed for the
	// database's sake (not its input), nil once a later write committed.
	failMu  sync.Mutex
	failing error

	// Caches of committed rows, touched only by the writer goroutine and
	// thrown away whenever a transaction or savepoint is rolled back.
	c cache

	// im holds the instance minutes of committed batches not written yet
	// (instance_minutes.go), imAt when they were last written; both
	// changed only by the writer goroutine, im under imMu (which readers
	// of the table merging what is not written yet take to read it, see
	// notClosedIM; the writer reads it without).
	imMu sync.RWMutex
	im   map[imKey]imRow
	// imGen is odd while a transaction that writes sums of im to the
	// table is committing and until they have left im, even otherwise.
	imGen atomic.Uint64
	// testIMCommitted, set by tests only, is called when a transaction
	// that wrote sums of im has committed and before they leave im.
	testIMCommitted func()
	imAt            time.Time
	// imFlushing: a round of writing them is under way, imRound rows of
	// it still to write.
	imFlushing bool
	imRound    int
	clock      interface{ Now() time.Time }

	// prepared are statements prepared on the writer's one connection,
	// outside any transaction, by query: a transaction binds them
	// (Tx.StmtContext reuses the connection's statement) instead of
	// preparing every query afresh. Touched only by the writer goroutine.
	prepared map[string]*sql.Stmt

	// imBuf is the last transaction's emptied list of instance-minute
	// shares, for the next one to append to: a transaction stages one a
	// window report (800 at 1,000 x 20), and growing a fresh list each
	// time was 7% of the collector's allocated bytes. Writer goroutine
	// only; not kept beyond maxIMBuf.
	imBuf []imDelta
}

const maxIMBuf = 1 << 14

// cache holds ids and watermarks so that the hot path (a batch of window
// reports) runs no lookups.
type cache struct {
	instances map[instKey]instRef
	breakers  map[int64]map[string]*brRef // instance id -> breaker name
	deps      map[cbdash.DependencyKey]int64
	wm        *watermarks      // nil = not loaded
	seqs      map[runKey]int64 // last stored seq of an agent process (SQLite; PostgreSQL reads them locked: lockRuns)
	// rows are this writer's committed windows_second rows of the last
	// rowCacheSpan (by start, behind the newest), so that a second
	// reported into by several groups is read once. No other process
	// writes them (their writer column is this writer's id); the
	// retention deletes rows before the roll-up watermark only, which
	// mergeRow reads from the table (rowCached).
	rows map[bucketKey]*row
	// rowsFrom bounds what rows does not hold: every row of this
	// writer's at level second starting at or after it is in rows (one
	// that is not was never written: rowAbsent). written is the newest
	// start of a second row this writer has tried to write (committed
	// or not; the bound after rows is emptied is the second after it).
	// On PostgreSQL both start at the minimum (a writer's id is new at
	// each Open), on SQLite at the maximum (the file's rows are the last
	// run's too: every row not cached is read).
	rowsFrom, written int64
	// seen is the last-seen time (Unix ms) the writer committed for an
	// instance from its batches (seenEvery).
	seen map[int64]int64
}

// seenEvery is how often a batch writes its instance's last-seen time:
// at most once in 5 s an instance, not with every batch (a row a second
// for every agent, 8% of the collector's CPU at 5,000 agents). The
// stored time is the latest hello or a batch at most 5 s before the
// latest; it is compared with the stale timeout (15 s by default) and
// shown as "seen Ns ago".
const seenEvery = 5 * 1000

// rowCacheSpan is how far behind the newest second the row cache keeps
// seconds (agents report each second within a few seconds of its end;
// a resend after a reconnect reads its rows from the table).
const rowCacheSpan = 10 * 1000

// maxCachedRows bounds the row cache (seconds x dependencies).
const maxCachedRows = 100_000

// runKey names one agent process of an instance.
type runKey struct{ inst, startedAt int64 }

type instKey struct{ service, instance string }

type instRef struct{ id, serviceID int64 }

type brRef struct {
	id    int64
	state string
}

// watermarks say how far roll-ups have gone (Unix ms, exclusive).
type watermarks struct {
	second int64 // seconds before it are in windows_minute
	minute int64 // minutes before it are in windows_hour
}

func (c *cache) reset() {
	c.instances = make(map[instKey]instRef)
	c.breakers = make(map[int64]map[string]*brRef)
	c.deps = make(map[cbdash.DependencyKey]int64)
	c.wm = nil
	c.seqs = make(map[runKey]int64)
	c.rows = make(map[bucketKey]*row)
	c.seen = make(map[int64]int64)
	c.rowsEmptied()
}

// rowsEmptied moves rowsFrom past every second written, once rows has
// been emptied.
func (c *cache) rowsEmptied() {
	c.rowsFrom = c.written
	if c.written < math.MaxInt64 {
		c.rowsFrom++
	}
}

// keepRows adds the rows of a committed transaction to the row cache and
// forgets those older than rowCacheSpan behind the newest start of this
// transaction's rows. The reference is the transaction's own, not the
// newest start ever kept: a window may start minutes ahead of its batch
// (protocol.MaxFutureSkewMillis), and such an outlier would otherwise
// have every second of the present forgotten as soon as it is kept,
// until the clock caught up with it (it costs its own group's rows
// only).
func (c *cache) keepRows(rows map[bucketKey]*row) {
	if len(rows) == 0 {
		return
	}
	newest := int64(math.MinInt64)
	for k, r := range rows {
		c.rows[k] = r
		newest = max(newest, k.start)
	}
	if len(c.rows) > maxCachedRows {
		clear(c.rows)
		c.rowsEmptied()
		return
	}
	for k := range c.rows {
		if k.start < newest-rowCacheSpan {
			delete(c.rows, k)
		}
	}
	c.rowsFrom = max(c.rowsFrom, newest-rowCacheSpan)
}

func newWriter(db *sql.DB, d *dialect, opts Options) *writer {
	w := &writer{
		db:       db,
		d:        d,
		log:      opts.Logger,
		maxGroup: opts.MaxGroup,
		queue:    make(chan *op, opts.QueueSize),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		im:       make(map[imKey]imRow),
		prepared: make(map[string]*sql.Stmt),
		held:     make(map[*Stream]struct{}),
		clock:    opts.Clock,
	}
	w.imAt = w.clock.Now()
	w.c.written = math.MaxInt64 // SQLite's; PostgreSQL's, set at Open (noRowsWritten)
	w.c.reset()
	return w
}

// stop closes the queue to new ops and waits until every op already queued
// has been committed and the goroutine has returned. It reports whether
// this call did the stopping.
func (w *writer) stop() bool {
	first := false
	w.stopOnce.Do(func() {
		first = true
		w.qmu.Lock()
		close(w.quit)
		w.qmu.Unlock()
	})
	<-w.stopped
	return first
}

// run is the writer goroutine.
func (w *writer) run() {
	defer close(w.stopped)
	group := make([]*op, 0, w.maxGroup)
	for {
		first := w.next
		w.next = nil
		if first == nil {
			select {
			case first = <-w.queue:
			case <-w.quit:
				w.drain(group)
				return
			}
		}
		group = append(group[:0], first)
		group = w.collect(group)
		if len(group) > 1 && len(group) < w.maxGroup && waits(group) {
			group = w.collectFor(group, groupWait)
		}
		w.pace(len(group))
		w.commit(group)
	}
}

// drain commits what is queued once stop has closed quit (ops enqueued
// after it see stopped closed and report ErrClosed), ends the batches
// held for an answer that can no longer come, and writes the buffered
// instance minutes.
func (w *writer) drain(group []*op) {
	for {
		group = w.collect(group[:0])
		if len(group) == 0 {
			break
		}
		w.commit(group)
	}
	w.releaseHeld()
	if len(w.im) > 0 {
		w.commit(append(group[:0], &op{flushIM: true, shared: true, run: func(*wtx) error { return nil }}))
	}
}

// collect appends the ops waiting (the one a group left, next, then the
// queue's), up to maxGroup, without blocking.
func (w *writer) collect(group []*op) []*op {
	if w.next != nil && len(group) < w.maxGroup {
		group = append(group, w.next)
		w.next = nil
	}
	for len(group) < w.maxGroup {
		select {
		case o := <-w.queue:
			group = append(group, o)
		default:
			return group
		}
	}
	return group
}

// collectFor appends the ops that arrive within d, up to maxGroup, and
// stops early when a prompt op arrives (see waits), or when none arrives
// for groupIdle (groupIdleMany once groupMany have arrived during the
// wait): a few writers that each wait
// for their last op (a handful of HTTP agents, agents resending a
// backlog, however many ops they had queued at once) are not kept
// waiting for company that is not coming, while the pauses of a busy
// machine do not split the stream of a thousand agents into small
// transactions.
func (w *writer) collectFor(group []*op, d time.Duration) []*op {
	t := time.NewTimer(d)
	defer t.Stop()
	arrived := 0 // ops that came during the wait
	idle := time.NewTimer(w.idleFor(arrived))
	defer idle.Stop()
	for len(group) < w.maxGroup {
		select {
		case o := <-w.queue:
			group = append(group, o)
			if o.prompt { // someone waits for it: no more company
				return group
			}
			arrived++
			idle.Reset(w.idleFor(arrived))
		case <-idle.C:
			return group
		case <-t.C:
			return group
		case <-w.quit:
			return group
		}
	}
	return group
}

// do enqueues o and waits for its outcome. If ctx ends while o is queued
// or running, do returns ctx's error and o may still be committed later
// (a batch is then not acknowledged; the agent resends it and it is
// recognised as a duplicate).
func (w *writer) do(ctx context.Context, o *op) error {
	o.done = make(chan error, 1)
	if err := w.enqueue(ctx, o); err != nil {
		return err
	}
	select {
	case err := <-o.done:
		return err
	case <-w.stopped:
		select {
		case err := <-o.done:
			return err
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *writer) enqueue(ctx context.Context, o *op) error {
	w.qmu.RLock()
	defer w.qmu.RUnlock()
	select {
	case <-w.quit:
		return ErrClosed
	default:
	}
	select {
	case w.queue <- o:
		return nil
	case <-w.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// try enqueues a fire-and-forget op if there is room, and reports whether
// it did.
func (w *writer) try(o *op) bool {
	w.qmu.RLock()
	defer w.qmu.RUnlock()
	select {
	case <-w.quit:
		return false
	default:
	}
	select {
	case w.queue <- o:
		return true
	default:
		w.dropped.Add(1)
		return false
	}
}

// committedAfterAll asks PostgreSQL, on another connection, whether the
// transaction txid committed although its COMMIT failed (txid_status; 0 =
// not known, SQLite: false). A transaction still in progress (its
// backend has not read the COMMIT yet) is asked about again for up to
// lostCommitWait; false when the server cannot be asked.
func (w *writer) committedAfterAll(txid int64) bool {
	if !w.d.postgres || txid == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lostCommitWait)
	defer cancel()
	for {
		var status sql.NullString
		if err := w.db.QueryRowContext(ctx, "SELECT txid_status($1)", txid).Scan(&status); err != nil {
			return false
		}
		if status.String != "in progress" {
			return status.String == "committed"
		}
		t := time.NewTimer(20 * time.Millisecond) // real time: the server's pace
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// lostCommitWait bounds how long committedAfterAll waits for a
// transaction whose COMMIT's answer was lost to end.
const lostCommitWait = 5 * time.Second

// prepare prepares queries on the writer's connection for the next
// transactions (outside a transaction: the pool's one connection is free).
// A query that fails to prepare is prepared per transaction, as before.
func (w *writer) prepare(queries []string) {
	for _, q := range queries {
		if _, ok := w.prepared[q]; ok || len(w.prepared) >= maxPrepared {
			continue
		}
		if st, err := w.db.PrepareContext(context.Background(), q); err == nil {
			w.prepared[q] = st
		}
	}
}

// maxPrepared bounds the statements the writer keeps prepared (its
// queries are a fixed set; the bound guards against a query built with a
// value).
const maxPrepared = 256

// groupWait is how long the writer waits for more operations when a group
// already has several (the sign of many concurrent writers, such as a
// thousand agents' batches): fewer, larger transactions, each with its
// fixed costs (statements, the per-second rows, the commit and its WAL
// pages) shared. A lone operation never waits. At 1,000 agents x 20
// breakers, 50 ms instead of 5 ms took the server from 39 to 27 us of CPU
// per window report (issue 15, third round), and 150 ms with
// groupIdleMany from 22 to 17.6 us (fifth round, 28.6 to 8.4
// transactions a second); see docs/benchmarks.md. It adds up to 150 ms to
// an acknowledgement under such load, which agents do not wait for (they
// keep sending and resend what is unacknowledged after a reconnect).
// It is real time, not the store's clock: it paces CPU work, as a
// scheduler would, and says nothing about the data.
const groupWait = 150 * time.Millisecond

// groupIdle ends a group's wait early when no operation arrives for this
// long (collectFor): at a thousand batches a second one comes every
// millisecond, so a 5 ms pause is rare; a few sequential writers pay 5 ms
// a round, as they did when groupWait was 5 ms.
const groupIdle = 5 * time.Millisecond

// groupMany is how many operations must arrive while a group waits for
// its idle wait to be groupIdleMany: a stream of them is many concurrent
// writers, not a handful waiting in turn (those queue all they have at
// once, then wait for the commit, so none arrives during the wait).
const groupMany = 16

// groupIdleMany ends the wait of a group, once groupMany operations have
// arrived during it, when no more arrives for this long. On two busy cores a thousand agents'
// batches arrive with pauses of more than groupIdle (a scheduler's
// time slice, a GC), each of which cut the group short.
const groupIdleMany = 20 * time.Millisecond

// allFull reports whether every op of group is a batch of a stream that
// hands nothing more before one of its batches' outcome has come
// (Stream.Save's full): then no op can come while the group waits.
func allFull(group []*op) bool {
	streams := make(map[*Stream]bool, 8) // stream: one of its ops is full
	for _, o := range group {
		if o.stream == nil {
			return false
		}
		streams[o.stream] = streams[o.stream] || o.full
	}
	for _, full := range streams {
		if !full {
			return false
		}
	}
	return true
}

// waits reports whether a group of several ops waits for company: not
// when none can come (allFull), nor when one of them is prompt. The wait
// shares a transaction's costs among a stream of batches, whose
// acknowledgements nobody waits for; a hello's welcome (the agent's
// connection reads nothing more until it has it) or a hold's creation
// would wait up to groupWait for it, for every hello during a
// fleet-wide hold.
func waits(group []*op) bool {
	for _, o := range group {
		if o.prompt {
			return false
		}
	}
	return !allFull(group)
}

// idleFor is the idle wait of a group after n operations arrived while
// it waited: groupIdleMany once they are many (groupMany), or from the
// start while the writer is busy (a thousand agents' batches split over
// two collectors come every 2 ms each, and a 5 ms pause among the first
// sixteen cut most groups short: three times the transactions, each
// with its fixed costs, of one collector taking them all).
func (w *writer) idleFor(n int) time.Duration {
	if n >= groupMany || w.busy {
		return groupIdleMany
	}
	return groupIdle
}

// pace counts n ops taken for a group and, once a second has passed
// since the last time, sets busy for the next one.
func (w *writer) pace(n int) {
	w.rateOps += n
	now := time.Now()
	if el := now.Sub(w.rateAt); el >= time.Second {
		w.busy = float64(w.rateOps) >= busyRate*el.Seconds()
		w.rateAt, w.rateOps = now, 0
	}
}

// busyRate is the rate of ops (a second) from which the writer is busy:
// the idle wait of a group of several ops is groupIdleMany from its
// start (a lone op still never waits: a writer that waits for each of
// its ops in turn is not slowed down however fast it goes). At 1,000
// agents x 20 breakers on two collectors (500 batches a second each) it
// took each collector from 15-28 to 6-11 transactions a second
// (bench/collectors.sh).
const busyRate = 200

// wtx is the writer's view of one group transaction.
type wtx struct {
	ctx   context.Context
	w     *writer
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
	// dirty is set when a savepoint was rolled back: the caches may then
	// name rows that do not exist.
	dirty bool
	// broken is set when a savepoint could not be rolled back or
	// released: nothing of the transaction may be committed.
	broken error
	acc    *accumulator
	im     []imDelta // this transaction's instance minutes, report by report
	// runs and seen are the batches' last seqs and instances' last-seen
	// times, staged by saveBatch and written by flush in a few multi-row
	// statements.
	runs map[runKey]int64
	seen map[int64]int64
	// rows are the windows_second rows this transaction wrote, for the
	// writer's row cache once committed.
	rows map[bucketKey]*row
	// txid is the PostgreSQL transaction's id (0 on SQLite).
	txid int64
	// shared: the group takes the schema's lock in shared mode (a group
	// of batches on PostgreSQL: beginGroup).
	shared bool
	// locked are the last seqs of the agent processes whose instance_runs
	// rows this transaction holds locked (PostgreSQL: lockRuns, lockRun),
	// read under the lock; opLocked, those the running op locked, which
	// the rollback to its savepoint releases (then forgotten).
	locked   map[runKey]int64
	opLocked []runKey
	// inOp: a group's op is running; spOpen: its savepoint is open
	// (savepoint, open).
	inOp, spOpen bool
	// unprepared are the queries this transaction had to prepare itself.
	unprepared []string
	// imCut: instance minutes before it (Unix ms) were deleted from the
	// table; once committed, the writer's sums of them go too.
	imCut int64
}

func newWtx(ctx context.Context, w *writer, tx *sql.Tx) *wtx {
	x := &wtx{ctx: ctx, w: w, tx: tx, stmts: make(map[string]*sql.Stmt), acc: newAccumulator(),
		runs: make(map[runKey]int64), seen: make(map[int64]int64), rows: make(map[bucketKey]*row), im: w.imBuf,
		locked: make(map[runKey]int64)}
	w.imBuf = nil
	return x
}

// st returns query's statement, prepared once per transaction. (A
// statement prepared on the pool cannot be prepared while the pool's only
// connection is inside this transaction; preparing per transaction costs a
// few dozen preparations a second with group commit.)
func (x *wtx) st(query string) (*sql.Stmt, error) {
	if st, ok := x.stmts[query]; ok {
		return st, nil
	}
	if p, ok := x.w.prepared[query]; ok {
		st := x.tx.StmtContext(x.ctx, p)
		x.stmts[query] = st
		return st, nil
	}
	st, err := x.tx.PrepareContext(x.ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", query, err)
	}
	x.stmts[query] = st
	x.unprepared = append(x.unprepared, query)
	return st, nil
}

// exec runs a prepared statement in the transaction.
func (x *wtx) exec(query string, args ...any) (sql.Result, error) {
	if err := x.open(); err != nil {
		return nil, err
	}
	return x.rawExec(query, args...)
}

// rawExec is exec without opening the op's savepoint.
func (x *wtx) rawExec(query string, args ...any) (sql.Result, error) {
	st, err := x.st(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(x.ctx, x.w.d.args(args)...)
}

// queryRow runs a prepared single-row query in the transaction.
func (x *wtx) queryRow(query string, args ...any) (*sql.Row, error) {
	if err := x.open(); err != nil {
		return nil, err
	}
	st, err := x.st(query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(x.ctx, x.w.d.args(args)...), nil
}

// insertID runs an INSERT into a table with an id column and returns the
// new row's id (RETURNING: both backends have it; PostgreSQL's driver has
// no LastInsertId).
func (x *wtx) insertID(query string, args ...any) (int64, error) {
	row, err := x.queryRow(query+" RETURNING id", args...)
	if err != nil {
		return 0, err
	}
	var id int64
	err = row.Scan(&id)
	return id, err
}

// savepoint runs fn inside a savepoint, rolling back to it when fn fails
// so that the other ops of the group still commit. The savepoint is
// opened by fn's first statement (open): an op that runs none, such as
// a batch of known breakers whose writes are staged for the group's
// flush, costs no statement at all.
func (x *wtx) savepoint(fn func(*wtx) error) error {
	x.inOp, x.spOpen, x.opLocked = true, false, x.opLocked[:0]
	err := fn(x)
	x.inOp = false
	if err != nil {
		err = x.w.d.translate(err)
		x.dirty = true
		x.w.c.reset()
		for _, rk := range x.opLocked {
			delete(x.locked, rk)
		}
		if !x.spOpen {
			return err // nothing was written
		}
		if _, rerr := x.rawExec("ROLLBACK TO op"); rerr != nil {
			x.broken = fmt.Errorf("store: rollback to savepoint: %w", rerr)
			return errors.Join(err, x.broken)
		}
		if _, rerr := x.rawExec("RELEASE op"); rerr != nil {
			x.broken = fmt.Errorf("store: release savepoint: %w", rerr)
			return errors.Join(err, x.broken)
		}
		return err
	}
	if !x.spOpen {
		return nil
	}
	if _, err := x.rawExec("RELEASE op"); err != nil {
		x.broken = fmt.Errorf("store: release savepoint: %w", err)
		return x.broken
	}
	return nil
}

// open opens the op's savepoint before its first statement.
func (x *wtx) open() error {
	if !x.inOp || x.spOpen {
		return nil
	}
	if _, err := x.rawExec("SAVEPOINT op"); err != nil {
		return fmt.Errorf("store: savepoint: %w", err)
	}
	x.spOpen = true
	return nil
}

func (x *wtx) close() {
	for _, st := range x.stmts {
		st.Close()
	}
}

// WriterStats are the writer's counters, for metrics. Counters only grow.
type WriterStats struct {
	Queued       int    // operations waiting for a transaction now
	QueueCap     int    // Options.QueueSize
	Transactions uint64 // transactions committed
	Ops          uint64 // operations committed (a batch, a hello, a command...)
	FailedOps    uint64 // operations that returned an error (not SkippedOps)
	SkippedOps   uint64 // batches not tried (ErrSkipped: their stream was stopped, see Stream)
	Dropped      uint64 // best-effort background writes (token last-used) skipped on a full queue
	Retried      uint64 // batch groups PostgreSQL ended for a deadlock or a serialization failure, run again
}

// Stats returns the writer's counters. Safe for concurrent use; cheap.
func (s *Store) Stats() WriterStats {
	w := s.w
	return WriterStats{Queued: len(w.queue), QueueCap: cap(w.queue), Transactions: w.txs.Load(),
		Ops: w.ops.Load(), FailedOps: w.failed.Load(), SkippedOps: w.skipped.Load(), Dropped: w.dropped.Load(),
		Retried: w.retries.Load()}
}

// storageError reports whether err is the database's trouble rather than
// the input's (a refusal wrapping a cbdash sentinel) or the caller's (its
// ctx, or its stream's Stop: ErrSkipped, nothing was tried).
func storageError(err error) bool {
	for _, e := range []error{cbdash.ErrInvalid, cbdash.ErrNotFound, cbdash.ErrConflict, cbdash.ErrForbidden,
		cbdash.ErrUnauthorized, context.Canceled, context.DeadlineExceeded, ErrClosed, ErrSkipped} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// writableEvery is how long Store.Writable's answer is reused.
const writableEvery = time.Second

// Writable reports whether the store can commit now: nil, or why not (a
// read-only file or file system, a full disk, PostgreSQL unreachable or
// refusing writes, a schema the writes do not fit: a renamed column or a
// dropped table of the ones a batch is written to). It fails while the
// last write that failed for the database's sake has not been followed by
// one that committed (or by a Probe that succeeded); otherwise it runs
// Probe's writes (at most once per second: that answer is reused
// meanwhile). Errors: that write's or the probe's error, wrapped; ctx's.
func (s *Store) Writable(ctx context.Context) error {
	s.w.failMu.Lock()
	f := s.w.failing
	s.w.failMu.Unlock()
	if f != nil {
		return fmt.Errorf("store: the last write failed: %w", f)
	}
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if !s.healthAt.IsZero() && time.Since(s.healthAt) < writableEvery {
		return s.healthErr
	}
	err := s.probe(ctx)
	if ctx.Err() != nil {
		return ctx.Err() // not an answer: not cached
	}
	if err != nil {
		err = fmt.Errorf("store: cannot commit: %w", err)
	}
	s.healthAt, s.healthErr = time.Now(), err
	return err
}
