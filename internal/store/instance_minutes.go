package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Per-instance history (instance_minutes): one row per dependency,
// instance and minute. A window report costs a row write here, twenty
// thousand a second for a thousand instances of twenty breakers, so the
// writer sums them in memory (a batch's share once its transaction has
// committed: a batch stored once is counted once) and writes the sums as
// upserts once their minute has ended (imGrace later, by the store's
// clock, for the reports still on their way) and when the store closes;
// the reads (InstanceHistory, FleetNotClosed, which the dependency page
// and the overview make on every load) merge the sums not written yet
// with the table's rows instead of having them written first. A row is
// so written about once, not every few seconds while its minute lasts (at 1,000 instances x 20 breakers, 20,000 rows a
// minute instead of 120,000); a report for a minute already written adds
// to its row at the next round. A crash (kill -9) loses the sums not
// written yet: the current minute and, until the round after its imGrace
// (up to imGrace + instanceMinutesEvery after its end), the last one; the
// per-dependency history is written with its batch. Only this process
// merges its sums: another collector sharing a PostgreSQL database reads
// the table's rows alone, without the minutes this one has not written.

// instanceMinutesEvery is how often the writer looks for instance minutes
// to write.
const instanceMinutesEvery = 10 * time.Second

// imGrace is how long after a minute's end its sums wait for late
// reports before they are written.
const imGrace = 10 * time.Second

// imDue reports whether the sums of k may be written at now (Unix ms).
func imDue(k imKey, now int64) bool { return k.minute+60_000+imGrace.Milliseconds() <= now }

// imDueCount counts the sums of m due at now.
func imDueCount(m map[imKey]imRow, now int64) int {
	n := 0
	for k := range m {
		if imDue(k, now) {
			n++
		}
	}
	return n
}

// imKey names one row of instance_minutes.
type imKey struct{ dep, inst, minute int64 }

// imRow is a delta to add to one row.
type imRow struct {
	calls, failures, slow, rejected int64
	rank                            int
}

func (r *imRow) add(o imRow) {
	r.calls = protocol.SatAdd(r.calls, o.calls)
	r.failures = protocol.SatAdd(r.failures, o.failures)
	r.slow = protocol.SatAdd(r.slow, o.slow)
	r.rejected = protocol.SatAdd(r.rejected, o.rejected)
	r.rank = min(r.rank, o.rank)
}

// imDelta is one window report's share of an instance minute.
type imDelta struct {
	k imKey
	r imRow
}

// addInto adds d to m[k]. The sums are held by value: a map of tens of
// thousands of them has no pointer for the garbage collector to follow.
func addInto(m map[imKey]imRow, k imKey, d imRow) {
	if cur, ok := m[k]; ok {
		cur.add(d)
		d = cur
	}
	m[k] = d
}

// addInstanceMinute stages window w of instance inst, dependency dep, for
// its minute, in this transaction (the writer keeps it once committed).
func (x *wtx) addInstanceMinute(dep, inst int64, w *protocol.Window) {
	c := w.Counts
	x.im = append(x.im, imDelta{imKey{dep, inst, w.Start - w.Start%60000},
		imRow{calls: c.Admitted, failures: c.Failures, slow: c.Slow, rejected: c.Rejected(), rank: cbdash.StateRank(w.State)}})
}

// imFlushRows bounds the buffered instance minutes one group transaction
// writes when they are due by time: a fleet's minutes are spread over
// several transactions instead of one large one (a read's flush writes
// them all).
const imFlushRows = 4000

// writeInstanceMinutes writes buffered instance minutes as upserts: with
// all, the writer's committed sums and this transaction's (which are then
// not kept); otherwise at most imFlushRows of the writer's that are due
// at now (Unix ms, imDue). It returns the
// keys of the writer's sums it wrote (to forget once committed).
func (x *wtx) writeInstanceMinutes(all bool, now int64) ([]imKey, error) {
	var written []imKey
	args := make([]any, 0, 8*min(len(x.w.im)+len(x.im), imFlushRows))
	put := func(k imKey, r imRow) {
		args = append(args, k.dep, k.inst, k.minute, r.calls, r.failures, r.slow, r.rejected, r.rank)
	}
	for k := range x.w.im {
		if !all && len(written) >= imFlushRows {
			break
		}
		if !all && !imDue(k, now) {
			continue // its minute has not ended
		}
		written = append(written, k)
	}
	// In the table's key order: two processes' transactions that add to
	// the same rows (an instance that moved collector within a minute)
	// lock them in one order, so they wait instead of deadlocking.
	sortIMKeys(written)
	for _, k := range written {
		put(k, x.w.im[k])
	}
	if all {
		mine := make(map[imKey]imRow, len(x.im))
		for _, d := range x.im {
			addInto(mine, d.k, d.r)
		}
		keys := make([]imKey, 0, len(mine))
		for k := range mine {
			keys = append(keys, k)
		}
		sortIMKeys(keys)
		for _, k := range keys {
			put(k, mine[k])
		}
	}
	// Rows in statements of up to 100 (execRows); no key twice in one
	// (PostgreSQL refuses an upsert that touches a row twice): the
	// writer's sums and this transaction's are written by separate
	// statements when a key is in both.
	cut := 8 * len(written)
	for _, part := range [][]any{args[:cut], args[cut:]} {
		if err := x.execRows(8, part, x.w.d.imUpsert); err != nil {
			return nil, fmt.Errorf("store: save instance minute: %w", err)
		}
	}
	if all {
		x.im = x.im[:0]
	}
	return written, nil
}

// sortIMKeys sorts keys in instance_minutes' key order (dep_id, minute,
// instance_id).
func sortIMKeys(keys []imKey) {
	slices.SortFunc(keys, func(a, b imKey) int {
		if a.dep != b.dep {
			return cmpInt(a.dep, b.dep)
		}
		if a.minute != b.minute {
			return cmpInt(a.minute, b.minute)
		}
		return cmpInt(a.inst, b.inst)
	})
}

// imUpsert is the statement that adds rows of 8 columns (values) to
// instance_minutes.
func (d *dialect) imUpsert(values string) string {
	return `INSERT INTO instance_minutes (dep_id, instance_id, minute, calls, failures, slow, rejected, state_rank)
		VALUES ` + values + `
		ON CONFLICT (dep_id, minute, instance_id) DO UPDATE SET calls = instance_minutes.calls + excluded.calls, failures = instance_minutes.failures + excluded.failures,
		slow = instance_minutes.slow + excluded.slow, rejected = instance_minutes.rejected + excluded.rejected, state_rank = ` + d.least("instance_minutes.state_rank", "excluded.state_rank")
}

// writeOwnInstanceMinutes writes this transaction's own instance minutes
// (x.im) only, not the writer's buffered sums (Store.Probe's).
func (x *wtx) writeOwnInstanceMinutes() error {
	mine := make(map[imKey]imRow, len(x.im))
	for _, d := range x.im {
		addInto(mine, d.k, d.r)
	}
	args := make([]any, 0, 8*len(mine))
	for k, r := range mine {
		args = append(args, k.dep, k.inst, k.minute, r.calls, r.failures, r.slow, r.rejected, r.rank)
	}
	if err := x.execRows(8, args, x.w.d.imUpsert); err != nil {
		return fmt.Errorf("store: save instance minute: %w", err)
	}
	return nil
}

// flushInstanceMinutes has the writer write its buffered instance minutes
// now (the reads of instance_minutes call it first, so they see every
// stored batch).
func (s *Store) flushInstanceMinutes(ctx context.Context) error {
	return s.w.do(ctx, &op{flushIM: true, shared: true, run: func(*wtx) error { return nil }})
}

// expireInstanceMinutes deletes per-instance minutes older than keep; the
// writer's sums of them not written yet (which would be written later,
// and are read with the table's rows) go once the transaction commits.
func (x *wtx) expireInstanceMinutes(now int64, keep time.Duration) error {
	cut := now - keep.Milliseconds()
	if _, err := x.exec(`DELETE FROM instance_minutes WHERE minute < $1`, cut); err != nil {
		return fmt.Errorf("store: expire instance minutes: %w", err)
	}
	x.imCut = max(x.imCut, cut)
	return nil
}

// stateOfRank is the state of a cbdash.StateRank.
var stateOfRank = map[int]string{}

func init() {
	for _, s := range []string{protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed, protocol.StateClosed} {
		stateOfRank[cbdash.StateRank(s)] = s
	}
}

// InstanceHistory returns the per-minute history of every instance of a
// dependency with a minute in [q.From, q.To), by instance name (bytes)
// then minute. Service and Breaker are required (cbdash.ErrInvalid
// otherwise); zero times are unbounded. Every batch this process has
// committed counts: the writer's sums not written yet are added to the
// rows of the table (the dependency page reads this on every load; having
// the writer write them first made each load wait behind the writer's
// queue). A batch another process sharing the database committed counts
// once that process has written its sums (about a minute after the
// minute's end).
func (s *Store) InstanceHistory(ctx context.Context, q cbdash.InstanceHistoryQuery) ([]cbdash.InstanceMinute, error) {
	if q.Service == "" || q.Breaker == "" {
		return nil, fmt.Errorf("store: instance history: service and breaker are required: %w", cbdash.ErrInvalid)
	}
	lo, hi := q.From.UnixMilli(), int64(1<<62-1)
	if q.From.IsZero() {
		lo = -1 << 62
	}
	if !q.To.IsZero() {
		hi = q.To.UnixMilli()
	}
	var dep int64
	switch err := s.rdb.QueryRowContext(ctx, `SELECT id FROM dependencies WHERE service = $1 AND breaker = $2`, q.Service, q.Breaker).Scan(&dep); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("store: instance history: %w", err)
	}
	for range imTries {
		gen, mem := s.w.depIM(dep, lo, hi)
		if gen%2 == 1 {
			continue // sums are moving to the table
		}
		if s.testIMScanned != nil {
			s.testIMScanned()
		}
		out, err := s.instanceHistory(ctx, dep, lo, hi, mem)
		if err != nil {
			return nil, err
		}
		if s.w.imGen.Load() == gen {
			return out, nil
		}
	}
	// The writer kept writing sums to the table while this read: have it
	// write them all, and read the table alone.
	if err := s.flushInstanceMinutes(ctx); err != nil {
		return nil, fmt.Errorf("store: instance history: %w", err)
	}
	return s.instanceHistory(ctx, dep, lo, hi, nil)
}

// imTries is how many times InstanceHistory merges the writer's sums with
// the table before it has the writer write them first: a try fails only
// when a transaction wrote sums while it read (a round of them is a few
// transactions every instanceMinutesEvery).
const imTries = 4

// instMinute names a sum of depIM.
type instMinute struct{ inst, minute int64 }

// depIM returns the writer's sums not written yet of dependency dep and
// a minute in [lo, hi) (Unix ms), copied, with imGen as it was before: a
// read of the table after it that sees imGen even and unchanged once
// done saw none of these sums written (imGen is odd from before a commit
// that writes sums until they have left memory).
func (w *writer) depIM(dep, lo, hi int64) (uint64, map[instMinute]imRow) {
	gen := w.imGen.Load()
	out := map[instMinute]imRow{}
	w.imMu.RLock()
	defer w.imMu.RUnlock()
	for k, r := range w.im {
		if k.dep == dep && k.minute >= lo && k.minute < hi {
			out[instMinute{k.inst, k.minute}] = r
		}
	}
	return gen, out
}

// instanceHistory reads dependency dep's rows of a minute in [lo, hi) and
// adds mem to them (mem's other sums are minutes of their own).
func (s *Store) instanceHistory(ctx context.Context, dep, lo, hi int64, mem map[instMinute]imRow) ([]cbdash.InstanceMinute, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT m.instance_id, i.name, m.minute, m.calls, m.failures, m.slow, m.rejected, m.state_rank
		FROM instance_minutes m JOIN instances i ON i.id = m.instance_id
		WHERE m.dep_id = $1 AND m.minute >= $2 AND m.minute < $3`, dep, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("store: instance history: %w", err)
	}
	defer rows.Close()
	names := map[int64]string{}
	var out []cbdash.InstanceMinute
	add := func(name string, minute int64, r imRow) {
		out = append(out, cbdash.InstanceMinute{Instance: name, Start: time.UnixMilli(minute).UTC(),
			Calls: r.calls, Failures: r.failures, Slow: r.slow, Rejected: r.rejected, State: stateOfRank[r.rank]})
	}
	for rows.Next() {
		var k instMinute
		var name string
		var r imRow
		if err := rows.Scan(&k.inst, &name, &k.minute, &r.calls, &r.failures, &r.slow, &r.rejected, &r.rank); err != nil {
			return nil, fmt.Errorf("store: instance history: %w", err)
		}
		names[k.inst] = name
		if d, ok := mem[k]; ok {
			r.add(d)
			delete(mem, k)
		}
		add(name, k.minute, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: instance history: %w", err)
	}
	rows.Close()
	var unnamed []int64
	for k := range mem {
		if _, ok := names[k.inst]; !ok {
			names[k.inst] = ""
			unnamed = append(unnamed, k.inst)
		}
	}
	if err := s.instanceNames(ctx, unnamed, names); err != nil {
		return nil, fmt.Errorf("store: instance history: %w", err)
	}
	for k, r := range mem {
		add(names[k.inst], k.minute, r)
	}
	slices.SortFunc(out, func(a, b cbdash.InstanceMinute) int {
		if c := strings.Compare(a.Instance, b.Instance); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	return out, nil
}

// instanceNames sets names[id] for each of ids (instances rows).
func (s *Store) instanceNames(ctx context.Context, ids []int64, names map[int64]string) error {
	for part := range slices.Chunk(ids, 500) {
		var args params
		list := make([]string, len(part))
		for i, id := range part {
			list[i] = args.add(id)
		}
		rows, err := s.rdb.QueryContext(ctx, `SELECT id, name FROM instances WHERE id IN (`+strings.Join(list, ", ")+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				rows.Close()
				return err
			}
			names[id] = name
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// FleetNotClosed counts, per minute starting in [from, to), the instance
// breakers that were open, half-open or forced open at some moment of the
// minute and the dependencies (service + breaker) with at least one such
// instance, oldest first; minutes with none are absent. Every batch this
// process has committed counts: the minutes its writer has not written
// yet are merged in, not written first (the overview reads this on every
// load, and writing a fleet's current minute, 20,000 rows at 1,000
// instances x 20 breakers, behind the writer's queue made each load wait
// for it). Those of another process sharing the database count once it
// has written them (see InstanceHistory).
func (s *Store) FleetNotClosed(ctx context.Context, from, to time.Time) ([]cbdash.FleetMinute, error) {
	lo, hi := from.UnixMilli(), to.UnixMilli()
	// The writer's first, then the table's: a key the writer no longer
	// holds was written and committed before it let go of it, so the
	// query, which starts after, sees its row (a key in both counts
	// once).
	keys := s.w.notClosedIM(lo, hi)
	// state_rank < 3 (open, half-open, forced open) as a constant, as the
	// partial index instance_minutes_not_closed says it (migration 00024):
	// a planner uses it only for a query that says the same.
	rows, err := s.rdb.QueryContext(ctx, `SELECT minute, dep_id, instance_id FROM instance_minutes
		WHERE state_rank < 3 AND minute >= $1 AND minute < $2`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("store: fleet not closed: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k imKey
		if err := rows.Scan(&k.minute, &k.dep, &k.inst); err != nil {
			return nil, fmt.Errorf("store: fleet not closed: %w", err)
		}
		keys[k] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: fleet not closed: %w", err)
	}
	type depMinute struct{ minute, dep int64 }
	perMinute := map[int64]*cbdash.FleetMinute{}
	deps := map[depMinute]bool{}
	for k := range keys {
		f := perMinute[k.minute]
		if f == nil {
			f = &cbdash.FleetMinute{Start: time.UnixMilli(k.minute).UTC()}
			perMinute[k.minute] = f
		}
		f.Instances++
		if dm := (depMinute{k.minute, k.dep}); !deps[dm] {
			deps[dm] = true
			f.Dependencies++
		}
	}
	out := make([]cbdash.FleetMinute, 0, len(perMinute))
	for _, f := range perMinute {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b cbdash.FleetMinute) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// notClosedIM returns the keys of the instance minutes not written yet,
// of a minute in [lo, hi) (Unix ms), whose state was open, half-open or
// forced open.
func (w *writer) notClosedIM(lo, hi int64) map[imKey]struct{} {
	notClosed := cbdash.StateRank(protocol.StateForcedOpen) // open 0, half-open 1, forced open 2
	out := map[imKey]struct{}{}
	w.imMu.RLock()
	defer w.imMu.RUnlock()
	for k, r := range w.im {
		if k.minute >= lo && k.minute < hi && r.rank <= notClosed {
			out[k] = struct{}{}
		}
	}
	return out
}
