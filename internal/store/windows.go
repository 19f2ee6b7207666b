package store

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Levels of history, finest first.
type level int

const (
	levelSecond level = iota
	levelMinute
	levelHour
)

// width is the bucket width of a level in milliseconds.
func (l level) width() int64 {
	switch l {
	case levelSecond:
		return 1000
	case levelMinute:
		return 60 * 1000
	default:
		return 3600 * 1000
	}
}

func (l level) table() string {
	switch l {
	case levelSecond:
		return "windows_second"
	case levelMinute:
		return "windows_minute"
	default:
		return "windows_hour"
	}
}

// floorMs returns the start of the bucket of width w holding t (Unix ms).
func floorMs(t, w int64) int64 {
	r := t % w
	if r < 0 {
		r += w
	}
	return t - r
}

// row is one bucket of one dependency's history.
type row struct {
	counts   protocol.Counts
	inFlight int64 // sum over instances in a second, max over sub-buckets above
	open     int64 // reports in a non-closed state in a second, max over sub-buckets above
	reports  int64 // window reports merged into the bucket
	latSum   float64
	lat      []int64
}

// add merges o into r when both describe the same bucket (reports of
// different instances, or more reports of the same second): everything sums.
//
// Every sum saturates (protocol.SatAdd: a total never wraps to negative)
// and latency sums stay finite (finite), whatever was stored before.
func (r *row) add(o *row) {
	r.counts.Add(o.counts)
	r.inFlight = protocol.SatAdd(r.inFlight, o.inFlight)
	r.open = protocol.SatAdd(r.open, o.open)
	r.reports = protocol.SatAdd(r.reports, o.reports)
	r.latSum = finite(r.latSum + o.latSum)
	r.lat = addHist(r.lat, o.lat)
}

// roll merges a finer bucket o into the coarser bucket r: counts and
// histograms sum, in-flight and open instances take the maximum.
func (r *row) roll(o *row) {
	r.counts.Add(o.counts)
	r.inFlight = max(r.inFlight, o.inFlight)
	r.open = max(r.open, o.open)
	r.reports = protocol.SatAdd(r.reports, o.reports)
	r.latSum = finite(r.latSum + o.latSum)
	r.lat = addHist(r.lat, o.lat)
}

// addHist adds src to dst bucket by bucket, saturating.
func addHist(dst, src []int64) []int64 {
	if len(src) > len(dst) {
		dst = append(dst, make([]int64, len(src)-len(dst))...)
	}
	for i, v := range src {
		dst[i] = protocol.SatAdd(dst[i], v)
	}
	return dst
}

// finite keeps a latency sum a number JSON can carry: NaN and -Inf (which
// validation refuses, but a row stored before it may hold) read 0, +Inf
// reads math.MaxFloat64.
func finite(v float64) float64 {
	switch {
	case math.IsNaN(v), math.IsInf(v, -1):
		return 0
	case math.IsInf(v, 1):
		return math.MaxFloat64
	}
	return v
}

// addWindow adds one window report to r, as r.add(fromWindow(w)) does,
// without copying its histogram.
func (r *row) addWindow(w *protocol.Window) {
	r.counts.Add(w.Counts)
	r.inFlight = protocol.SatAdd(r.inFlight, w.InFlight)
	if w.State != protocol.StateClosed {
		r.open = protocol.SatAdd(r.open, 1)
	}
	r.reports = protocol.SatAdd(r.reports, 1)
	r.latSum = finite(r.latSum + w.LatencySumMs)
	r.lat = addHist(r.lat, w.Latency)
}

// fromWindow turns one window report into a second-level row.
func fromWindow(w *protocol.Window) row {
	r := row{counts: w.Counts, inFlight: w.InFlight, reports: 1, latSum: w.LatencySumMs}
	if w.State != protocol.StateClosed {
		r.open = 1
	}
	if len(w.Latency) > 0 {
		r.lat = slices.Clone(w.Latency)
	}
	return r
}

// encodeHist packs a histogram as one uvarint per bucket; nil when there
// is no non-zero bucket.
func encodeHist(h []int64) []byte {
	if !slices.ContainsFunc(h, func(v int64) bool { return v != 0 }) {
		return nil
	}
	b := make([]byte, 0, len(h)*2)
	for _, v := range h {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

var errBadHist = errors.New("store: corrupt latency histogram")

func decodeHist(b []byte) ([]int64, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := make([]int64, 0, protocol.NumLatencyBuckets)
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errBadHist
		}
		h = append(h, int64(v))
		b = b[n:]
	}
	return h, nil
}

const rowColumns = `admitted, successes, failures, errors, timeouts, panics, slow, ignored,
	rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead,
	fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp`

// scanRow reads rowColumns (after any leading columns given in dest).
func scanRow(sc interface{ Scan(...any) error }, r *row, lead ...any) error {
	var blob []byte
	c := &r.counts
	dest := append(lead, &c.Admitted, &c.Successes, &c.Failures, &c.Errors, &c.Timeouts, &c.Panics,
		&c.Slow, &c.Ignored, &c.RejectedOpen, &c.RejectedHalfOpen, &c.RejectedForced, &c.RejectedBulkhead,
		&c.FallbackSuccess, &c.FallbackFailure, &r.inFlight, &r.open, &r.reports, &r.latSum, &blob, &c.Misuse, &c.RejectedRamp)
	if err := sc.Scan(dest...); err != nil {
		return err
	}
	r.latSum = finite(r.latSum)
	h, err := decodeHist(blob)
	r.lat = h
	return err
}

func rowArgs(dep, start, writer int64, r *row) []any {
	c := r.counts
	return []any{dep, start, writer, c.Admitted, c.Successes, c.Failures, c.Errors, c.Timeouts, c.Panics,
		c.Slow, c.Ignored, c.RejectedOpen, c.RejectedHalfOpen, c.RejectedForced, c.RejectedBulkhead,
		c.FallbackSuccess, c.FallbackFailure, r.inFlight, r.open, r.reports, r.latSum, encodeHist(r.lat), c.Misuse, c.RejectedRamp}
}

// selectRowSQL reads one writer's row of level l (built once per level:
// the writer runs it thousands of times a second).
func selectRowSQL(l level) string { return rowSQL[l].sel }

// putRowSQL writes a whole row, replacing the one of the same bucket (an
// upsert both backends spell the same).
func putRowSQL(l level) string { return rowSQL[l].put }

var rowSQL = func() (q [levelHour + 1]rowStatements) {
	for l := levelSecond; l <= levelHour; l++ {
		q[l].sel = "SELECT " + rowColumns + " FROM " + l.table() + " WHERE dep_id = $1 AND start = $2 AND writer = $3"
		q[l].insert = "INSERT INTO " + l.table() + " (dep_id, start, writer, " + rowColumns + ") VALUES "
		q[l].put = q[l].putMany(placeholders(1, rowCols, ""))
	}
	return q
}()

// rowStatements are the statements of one level's rows.
type rowStatements struct{ sel, insert, put string }

// putMany is put over the rows of values (placeholders' "($1, ...), ...").
func (q rowStatements) putMany(values string) string {
	return q.insert + values + " ON CONFLICT (dep_id, start, writer) DO UPDATE SET " + replaceAll
}

// rowCols is the number of rowArgs: the key (dep_id, start, writer) and
// rowColumns.
const rowCols = 24

// replaceAll is the SET clause of putRowSQL: every column of rowColumns
// from the new row.
var replaceAll = func() string {
	cols := strings.Split(rowColumns, ",")
	for i, c := range cols {
		c = strings.TrimSpace(c)
		cols[i] = c + " = excluded." + c
	}
	return strings.Join(cols, ", ")
}()

// bucketKey names one row of one level.
type bucketKey struct{ dep, start int64 }

// accumulator gathers the window reports of one group transaction per
// dependency and second, so that each row is read and written once per
// transaction however many instances reported into it.
type accumulator struct {
	seconds map[bucketKey]*row
}

func newAccumulator() *accumulator {
	return &accumulator{seconds: make(map[bucketKey]*row)}
}

func (a *accumulator) addWindow(dep int64, w *protocol.Window) {
	k := bucketKey{dep, floorMs(w.Start, 1000)}
	if cur, ok := a.seconds[k]; ok {
		cur.addWindow(w)
		return
	}
	r := fromWindow(w)
	a.seconds[k] = &r
}

func sortedKeys(m map[bucketKey]*row) []bucketKey {
	keys := make([]bucketKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b bucketKey) int {
		if a.dep != b.dep {
			return cmpInt(a.dep, b.dep)
		}
		return cmpInt(a.start, b.start)
	})
	return keys
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mergeRow reads writer wr's row at (l, k), merges delta into it (add
// for seconds, roll for coarser levels), writes it back and returns the
// merged row. The writer's own second rows come from its row cache when
// it holds them (rowCached).
func (x *wtx) mergeRow(l level, k bucketKey, wr int64, delta *row) (*row, error) {
	cur, err := x.currentRow(l, k, wr)
	if err != nil {
		return nil, err
	}
	if l == levelSecond {
		cur.add(delta)
	} else {
		cur.roll(delta)
	}
	if l == levelSecond && wr == x.w.id {
		x.w.c.written = max(x.w.c.written, k.start)
	}
	if _, err := x.exec(putRowSQL(l), rowArgs(k.dep, k.start, wr, cur)...); err != nil {
		return nil, fmt.Errorf("write %s row: %w", l.table(), err)
	}
	if l == levelSecond && wr == x.w.id {
		x.rows[k] = cur
	}
	return cur, nil
}

// currentRow returns a copy of writer wr's row at (l, k) as stored: from
// the row cache when it holds it (rowCached), empty when the writer
// never wrote it (rowAbsent), else read from the table (empty when there
// is none).
func (x *wtx) currentRow(l level, k bucketKey, wr int64) (*row, error) {
	cur := &row{}
	if c, ok := x.rowCached(l, k, wr); ok {
		*cur = *c
		cur.lat = slices.Clone(c.lat) // the cached row stays as committed
		return cur, nil
	}
	if x.rowAbsent(l, k, wr) {
		return cur, nil
	}
	q, err := x.queryRow(selectRowSQL(l), k.dep, k.start, wr)
	if err != nil {
		return nil, err
	}
	switch err := scanRow(q, cur); {
	case errors.Is(err, sql.ErrNoRows):
		*cur = row{}
	case err != nil:
		return nil, fmt.Errorf("read %s row: %w", l.table(), err)
	}
	return cur, nil
}

// rowCached returns the writer's cached row of second k. Only this
// writer writes its rows, so a cached row is the stored one, with one
// exception: the retention (Compact's expire, of any process) deletes
// seconds before the roll-up watermark, so a second before it is read
// from the table. The watermark this group read cannot move before its
// COMMIT (Compact takes the exclusive lock).
func (x *wtx) rowCached(l level, k bucketKey, wr int64) (*row, bool) {
	if l != levelSecond || wr != x.w.id {
		return nil, false
	}
	wm := x.w.c.wm
	if wm == nil || k.start < wm.second {
		return nil, false
	}
	c, ok := x.w.c.rows[k]
	return c, ok
}

// rowAbsent reports whether the writer's own row of second k is known
// not to exist: not cached, at or after the cache's completeness bound
// (cache.rowsFrom: every row of the writer from there on is cached),
// and not before the roll-up watermark. The first group to report into
// a second so reads nothing (on PostgreSQL a writer's id is new at each
// Open: it has no rows).
func (x *wtx) rowAbsent(l level, k bucketKey, wr int64) bool {
	if l != levelSecond || wr != x.w.id {
		return false
	}
	wm := x.w.c.wm
	if wm == nil || k.start < wm.second || k.start < x.w.c.rowsFrom {
		return false
	}
	_, ok := x.w.c.rows[k]
	return !ok
}

// putSeconds writes the writer's own second rows whose args (rowArgs,
// flat) flush collected, in multi-row upserts: one statement for the
// dependencies of a second, not one a row.
func (x *wtx) putSeconds(args []any) error {
	return x.execShapes(rowCols, args, "", []int{20, 5, 1}, func(values string) string {
		return rowSQL[levelSecond].putMany(values)
	})
}

// flush writes the accumulated seconds into the writer's own rows. A
// second that lies before the roll-up watermark (its minute is already
// rolled up) is also merged into the writer's own row of its minute, and
// of its hour when that is rolled up too, so roll-ups stay exact whatever
// order reports arrive in.
func (x *wtx) flush() error {
	if err := x.flushRuns(); err != nil {
		return err
	}
	if len(x.acc.seconds) == 0 {
		return nil
	}
	wm, err := x.watermarks()
	if err != nil {
		return err
	}
	late, err := x.flushSeconds(wm)
	if err != nil {
		return err
	}
	return x.flushLate(wm, late)
}

// flushSeconds writes the accumulated seconds into the writer's own
// second rows: those at or after the watermark in multi-row upserts
// (putSeconds), each earlier one by itself; it returns the minutes the
// earlier ones add to (rollInto).
func (x *wtx) flushSeconds(wm *watermarks) (map[bucketKey]*row, error) {
	wr := x.w.id
	late := make(map[bucketKey]*row)
	var put []any // the rows of seconds at or after the watermark (rowArgs)
	for _, k := range sortedKeys(x.acc.seconds) {
		delta := x.acc.seconds[k]
		if k.start >= wm.second {
			cur, err := x.currentRow(levelSecond, k, wr)
			if err != nil {
				return nil, err
			}
			cur.add(delta)
			x.w.c.written = max(x.w.c.written, k.start)
			x.rows[k] = cur
			put = append(put, rowArgs(k.dep, k.start, wr, cur)...)
			continue
		}
		merged, err := x.mergeRow(levelSecond, k, wr, delta)
		if err != nil {
			return nil, err
		}
		if merged, err = x.secondOfAll(k, merged); err != nil {
			return nil, err
		}
		rollInto(late, bucketKey{k.dep, floorMs(k.start, levelMinute.width())}, delta, merged)
	}
	if err := x.putSeconds(put); err != nil {
		return nil, fmt.Errorf("write windows_second rows: %w", err)
	}
	return late, nil
}

// flushLate merges the minutes late seconds add to into the writer's own
// minute rows, and those minutes into its hour rows when the hour is
// rolled up too.
func (x *wtx) flushLate(wm *watermarks, late map[bucketKey]*row) error {
	wr := x.w.id
	lateHours := make(map[bucketKey]*row)
	for _, k := range sortedKeys(late) {
		delta := late[k]
		merged, err := x.mergeRow(levelMinute, k, wr, delta)
		if err != nil {
			return err
		}
		if k.start < wm.minute {
			rollInto(lateHours, bucketKey{k.dep, floorMs(k.start, levelHour.width())}, delta, merged)
		}
	}
	for _, k := range sortedKeys(lateHours) {
		if _, err := x.mergeRow(levelHour, k, wr, lateHours[k]); err != nil {
			return err
		}
	}
	return nil
}

// secondOfAll returns the in-flight calls and open instances of second k
// summed over every writer's row (own: this writer's, as just merged),
// for the maxima of a late second's minute: a second's instances are
// split among the writers' rows. With one writer (SQLite) it is own.
func (x *wtx) secondOfAll(k bucketKey, own *row) (*row, error) {
	if !x.w.d.postgres {
		return own, nil
	}
	st, err := x.st("SELECT in_flight, open_n FROM windows_second WHERE dep_id = $1 AND start = $2 AND writer <> $3")
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(x.ctx, k.dep, k.start, x.w.id)
	if err != nil {
		return nil, fmt.Errorf("read windows_second rows: %w", err)
	}
	defer rows.Close()
	all := &row{inFlight: own.inFlight, open: own.open}
	for rows.Next() {
		var f, o int64
		if err := rows.Scan(&f, &o); err != nil {
			return nil, fmt.Errorf("read windows_second rows: %w", err)
		}
		all.inFlight, all.open = protocol.SatAdd(all.inFlight, f), protocol.SatAdd(all.open, o)
	}
	return all, rows.Err()
}

// rollInto records, for the coarser bucket k, the counts added to a finer
// bucket (delta) and the finer bucket's new maxima (merged).
func rollInto(m map[bucketKey]*row, k bucketKey, delta, merged *row) {
	d := *delta
	d.lat = slices.Clone(delta.lat)
	d.inFlight, d.open = merged.inFlight, merged.open
	if cur, ok := m[k]; ok {
		cur.roll(&d)
		return
	}
	m[k] = &d
}

// watermarks returns the roll-up watermarks, loading them once per cache
// lifetime.
func (x *wtx) watermarks() (*watermarks, error) {
	if x.w.c.wm != nil {
		return x.w.c.wm, nil
	}
	var wm watermarks
	// Both in one round trip (PostgreSQL reads them in every batch group).
	q, err := x.queryRow(`SELECT (SELECT done_until FROM rollups WHERE level = 'second'),
		(SELECT done_until FROM rollups WHERE level = 'minute')`)
	if err != nil {
		return nil, err
	}
	var sec, minute sql.NullInt64
	if err := q.Scan(&sec, &minute); err != nil {
		return nil, fmt.Errorf("read roll-up watermarks: %w", err)
	}
	if !sec.Valid || !minute.Valid {
		return nil, errors.New("read roll-up watermarks: a level's row is missing from rollups")
	}
	wm.second, wm.minute = sec.Int64, minute.Int64
	x.w.c.wm = &wm
	return &wm, nil
}

// combiner combines the rows of one bucket of level fine written by
// several writers (each writer writes rows of its own: see doc.go,
// Several writers) into the bucket's one row, fed rows in order of start:
// the rows of one second add up (their instances are disjoint, so
// in-flight calls and open instances sum as counts do), the rows of a
// minute or an hour roll (counts add, in-flight and open take the
// maximum: each row's is already a maximum over seconds). emit receives
// each bucket's row once its rows have all come (flush for the last).
type combiner struct {
	fine  level
	emit  func(start int64, r *row)
	start int64
	cur   *row
}

func (c *combiner) add(start int64, r *row) {
	switch {
	case c.cur == nil:
	case start != c.start:
		c.emit(c.start, c.cur)
	case c.fine == levelSecond:
		c.cur.add(r)
		return
	default:
		c.cur.roll(r)
		return
	}
	c.start, c.cur = start, r
}

func (c *combiner) flush() {
	if c.cur != nil {
		c.emit(c.start, c.cur)
		c.cur = nil
	}
}
