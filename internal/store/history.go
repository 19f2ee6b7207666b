package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// maxPoints caps the buckets one History call may span.
const maxPoints = 100_000

// resolutionFor picks the level of a query: the requested one, or by
// range when none is (up to 2 h: seconds; up to 3 days: minutes; hours
// beyond).
func resolutionFor(q cbdash.HistoryQuery) (level, error) {
	switch q.Resolution {
	case cbdash.ResolutionSecond:
		return levelSecond, nil
	case cbdash.ResolutionMinute:
		return levelMinute, nil
	case cbdash.ResolutionHour:
		return levelHour, nil
	case "":
		switch d := q.To.Sub(q.From); {
		case d <= 2*time.Hour:
			return levelSecond, nil
		case d <= 3*24*time.Hour:
			return levelMinute, nil
		}
		return levelHour, nil
	}
	return 0, fmt.Errorf("%w: unknown resolution %q", cbdash.ErrInvalid, q.Resolution)
}

// History returns one dependency's history in [q.From, q.To), summed over
// its instances, at q.Resolution (or, when empty, seconds for ranges up to
// 2 h, minutes up to 3 days, hours beyond). From is rounded down and To up
// to whole buckets; buckets without any report are omitted, so points are
// sparse and sorted by At.
//
// Each Point sums the counts and latency histograms of the bucket exactly.
// InFlight is the sum over instances at the end of a second, and for a
// minute or hour the largest such second. Open is the number of window
// reports in a non-closed state in a second (one per instance and second
// normally, so: instances not closed), and for a minute or hour the largest
// such second: the most instances that were not closed at the same time.
//
// A coarse level is read where it is complete (rolled up by Compact), the
// finer levels after that, so the latest buckets are there before they are
// rolled up. Data past a level's retention is gone. Errors:
// cbdash.ErrInvalid for an empty service or breaker, To not after From, an
// unknown resolution, more than 100,000 buckets, or an Instance filter
// (history is kept per dependency, not per instance; see the package
// documentation); ctx's or a wrapped driver error.
func (s *Store) History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error) {
	l, from, to, err := historyRange(q)
	if err != nil {
		return nil, err
	}
	// One read transaction: the watermarks and the rows come from the
	// same snapshot, so no bucket is counted twice or missed.
	tx, err := s.rdb.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	defer tx.Rollback()
	var dep int64
	err = tx.QueryRowContext(ctx, "SELECT id FROM dependencies WHERE service = $1 AND breaker = $2", q.Service, q.Breaker).Scan(&dep)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return []cbdash.Point{}, nil
	case err != nil:
		return nil, fmt.Errorf("store: history: %w", err)
	}
	var wm watermarks
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT done_until FROM rollups WHERE level = 'second'),
		(SELECT done_until FROM rollups WHERE level = 'minute')`).Scan(&wm.second, &wm.minute); err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	var points []cbdash.Point
	for _, sp := range historySpans(l, from, to, wm) {
		if sp.from >= sp.to {
			continue
		}
		if points, err = readSpan(ctx, tx, sp.l, l, dep, sp.from, sp.to, points); err != nil {
			return nil, err
		}
	}
	if points == nil {
		points = []cbdash.Point{}
	}
	return points, nil
}

// historyRange checks q (see History's errors) and returns the level of
// its resolution and its buckets' range [from, to) in Unix ms.
func historyRange(q cbdash.HistoryQuery) (l level, from, to int64, err error) {
	if err := checkNames("service", q.Service, "breaker", q.Breaker); err != nil {
		return 0, 0, 0, err
	}
	if q.Instance != "" {
		return 0, 0, 0, fmt.Errorf("%w: history is kept per dependency, not per instance (use transitions for one instance)", cbdash.ErrInvalid)
	}
	if !q.To.After(q.From) {
		return 0, 0, 0, fmt.Errorf("%w: to must be after from", cbdash.ErrInvalid)
	}
	if l, err = resolutionFor(q); err != nil {
		return 0, 0, 0, err
	}
	width := l.width()
	from = floorMs(ms(q.From), width)
	to = floorMs(ms(q.To)+width-1, width)
	if (to-from)/width > maxPoints {
		return 0, 0, 0, fmt.Errorf("%w: %v at %s resolution is more than %d points", cbdash.ErrInvalid, q.To.Sub(q.From), l.name(), maxPoints)
	}
	return l, from, to, nil
}

// span is a range [from, to) (Unix ms) of history read from level l.
type span struct {
	l        level
	from, to int64
}

// historySpans says where each part of [from, to) at level l is read
// from: a level is complete up to the watermark of the level below it
// (wm), the finer levels after it. A span may be empty.
func historySpans(l level, from, to int64, wm watermarks) []span {
	switch l {
	case levelMinute:
		return []span{{levelMinute, from, min(to, max(from, wm.second))}, {levelSecond, max(from, wm.second), to}}
	case levelHour:
		a := min(to, max(from, wm.minute))
		b := min(to, max(a, wm.second))
		return []span{{levelHour, from, a}, {levelMinute, a, b}, {levelSecond, b, to}}
	}
	return []span{{l, from, to}}
}

// readSpan appends the rows of level src in [from, to) to points, the
// rows of one bucket of src combined over the writers that wrote them
// (combiner), rolled into buckets of level dst.
func readSpan(ctx context.Context, tx *readTx, src, dst level, dep, from, to int64, points []cbdash.Point) ([]cbdash.Point, error) {
	rows, err := tx.QueryContext(ctx, "SELECT start, "+rowColumns+" FROM "+src.table()+
		" WHERE dep_id = $1 AND start >= $2 AND start < $3 ORDER BY start", dep, from, to)
	if err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	defer rows.Close()
	b := pointBuilder{width: dst.width(), points: points, curStart: -1}
	c := combiner{fine: src, emit: b.roll}
	for rows.Next() {
		var r row
		var start int64
		if err := scanRow(rows, &r, &start); err != nil {
			return nil, fmt.Errorf("store: history: %w", err)
		}
		c.add(start, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	c.flush()
	b.emit()
	return b.points, nil
}

// pointBuilder rolls buckets (in order of start) into the points of
// buckets of width width (ms).
type pointBuilder struct {
	width    int64
	points   []cbdash.Point
	cur      row
	curStart int64 // -1: none yet
}

func (b *pointBuilder) roll(start int64, r *row) {
	at := floorMs(start, b.width)
	if at == b.curStart {
		b.cur.roll(r)
		return
	}
	b.emit()
	b.cur, b.curStart = *r, at
}

func (b *pointBuilder) emit() {
	if b.curStart < 0 {
		return
	}
	at, cur := fromMs(b.curStart), &b.cur
	if n := len(b.points); n > 0 && b.points[n-1].At.Equal(at) {
		// The bucket straddles two levels (an hour partly rolled up).
		p := &b.points[n-1]
		p.Counts.Add(cur.counts)
		p.Latency = addHist(p.Latency, cur.lat)
		p.LatencySumMs = finite(p.LatencySumMs + cur.latSum)
		p.InFlight = max(p.InFlight, cur.inFlight)
		p.Open = max(p.Open, int(cur.open))
		p.Reports += cur.reports
		return
	}
	b.points = append(b.points, cbdash.Point{At: at, Width: time.Duration(b.width) * time.Millisecond,
		Counts: cur.counts, Latency: cur.lat, LatencySumMs: cur.latSum, InFlight: cur.inFlight, Open: int(cur.open), Reports: cur.reports})
}

func (l level) name() string {
	switch l {
	case levelSecond:
		return string(cbdash.ResolutionSecond)
	case levelMinute:
		return string(cbdash.ResolutionMinute)
	}
	return string(cbdash.ResolutionHour)
}
