package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// rollGrace is how long after a minute ends Compact waits before rolling it
// up: reports of its last seconds are normally in by then. Later reports
// are still merged exactly (see flush), only at a higher write cost.
const rollGrace = 5 * time.Second

// rollStep bounds the seconds rolled in one transaction, so that a backlog
// never stalls ingest for long: Compact loops over steps.
const rollStep = time.Hour

// Compact rolls complete minutes of seconds into windows_minute and
// complete hours of minutes into windows_hour (exact sums, merged
// histograms, maxima of in-flight and open instances), then deletes what
// is older than each level's retention, counted back from now (seconds and
// minutes only once they have been rolled up), and transitions older than
// Retention.Transitions. Commands are never deleted. The work goes through
// the writer in transactions of at most an hour of seconds each, between
// which ingest proceeds. Call it about once a minute. Errors: ErrClosed,
// ctx's or a wrapped driver error; a failed step leaves the data
// consistent and the next Compact resumes.
func (s *Store) Compact(ctx context.Context, now time.Time) error {
	nowMs := ms(now)
	for {
		more := false
		err := s.w.do(ctx, &op{run: func(x *wtx) error {
			var err error
			more, err = x.rollSeconds(floorMs(nowMs-rollGrace.Milliseconds(), levelMinute.width()))
			return err
		}})
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	r := s.opts.Retention
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		if err := x.rollMinutes(); err != nil {
			return err
		}
		return x.expire(nowMs, r)
	}})
}

// depIDs lists every dependency id.
func (x *wtx) depIDs() ([]int64, error) {
	st, err := x.st("SELECT id FROM dependencies ORDER BY id")
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(x.ctx)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// oldest returns the earliest bucket start of level l at or after from,
// over all dependencies; ok is false when there is none.
func (x *wtx) oldest(l level, deps []int64, from int64) (start int64, ok bool, err error) {
	for _, d := range deps {
		q, err := x.queryRow("SELECT start FROM "+l.table()+" WHERE dep_id = $1 AND start >= $2 ORDER BY start LIMIT 1", d, from)
		if err != nil {
			return 0, false, err
		}
		var v int64
		if err := q.Scan(&v); err != nil {
			continue // sql.ErrNoRows: nothing for this dependency
		}
		if !ok || v < start {
			start, ok = v, true
		}
	}
	return start, ok, nil
}

// rollSeconds rolls the seconds in [watermark, target) into minutes, at
// most rollStep at a time, and reports whether more remains.
func (x *wtx) rollSeconds(target int64) (bool, error) {
	wm, err := x.watermarks()
	if err != nil {
		return false, err
	}
	from := wm.second
	if target <= from {
		return false, nil
	}
	deps, err := x.depIDs()
	if err != nil {
		return false, err
	}
	// Skip empty stretches (first run, downtime) instead of stepping
	// through them.
	first, ok, err := x.oldest(levelSecond, deps, from)
	if err != nil {
		return false, err
	}
	if !ok || first >= target {
		return false, x.setWatermark("second", target, &wm.second)
	}
	from = max(from, floorMs(first, levelMinute.width()))
	end := min(target, from+rollStep.Milliseconds())
	if err := x.rollRange(levelSecond, levelMinute, deps, from, end); err != nil {
		return false, err
	}
	if err := x.setWatermark("second", end, &wm.second); err != nil {
		return false, err
	}
	return end < target, nil
}

// rollMinutes rolls the minutes of every complete hour that is also
// completely rolled from seconds into hours.
func (x *wtx) rollMinutes() error {
	wm, err := x.watermarks()
	if err != nil {
		return err
	}
	target := floorMs(wm.second, levelHour.width())
	if target <= wm.minute {
		return nil
	}
	deps, err := x.depIDs()
	if err != nil {
		return err
	}
	if err := x.rollRange(levelMinute, levelHour, deps, wm.minute, target); err != nil {
		return err
	}
	return x.setWatermark("minute", target, &wm.minute)
}

// rollRange merges the rows of level fine in [from, to), of every
// writer, into the roll-ups' rows (writer 0) of level coarse. The rows of
// one second (one per writer that wrote into it) are first added (their
// instances are disjoint), then rolled; rows of a minute are rolled.
func (x *wtx) rollRange(fine, coarse level, deps []int64, from, to int64) error {
	sel := "SELECT start, " + rowColumns + " FROM " + fine.table() + " WHERE dep_id = $1 AND start >= $2 AND start < $3 ORDER BY start"
	st, err := x.st(sel)
	if err != nil {
		return err
	}
	for _, d := range deps {
		rows, err := st.QueryContext(x.ctx, d, from, to)
		if err != nil {
			return fmt.Errorf("store: roll up %s: %w", fine.table(), err)
		}
		acc, err := rollRows(rows, fine, coarse, d)
		if err != nil {
			return fmt.Errorf("store: roll up %s: %w", fine.table(), err)
		}
		for _, k := range sortedKeys(acc) {
			if _, err := x.mergeRow(coarse, k, 0, acc[k]); err != nil {
				return fmt.Errorf("store: roll up into %s: %w", coarse.table(), err)
			}
		}
	}
	return nil
}

// rollRows reads rows (start, rowColumns) of level fine ordered by start
// and rolls them into buckets of level coarse of dependency dep (see
// combiner). It closes rows.
func rollRows(rows *sql.Rows, fine, coarse level, dep int64) (map[bucketKey]*row, error) {
	defer rows.Close()
	acc := make(map[bucketKey]*row)
	c := combiner{fine: fine, emit: func(start int64, r *row) {
		k := bucketKey{dep, floorMs(start, coarse.width())}
		if cur, ok := acc[k]; ok {
			cur.roll(r)
		} else {
			acc[k] = r
		}
	}}
	for rows.Next() {
		var r row
		var start int64
		if err := scanRow(rows, &r, &start); err != nil {
			return nil, err
		}
		c.add(start, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.flush()
	return acc, nil
}

func (x *wtx) setWatermark(level string, v int64, cached *int64) error {
	if _, err := x.exec("UPDATE rollups SET done_until = $1 WHERE level = $2", v, level); err != nil {
		return fmt.Errorf("store: roll-up watermark: %w", err)
	}
	*cached = v
	return nil
}

// expire applies retention. Seconds and minutes are kept until rolled up
// even past their retention.
func (x *wtx) expire(now int64, r Retention) error {
	// Rows deleted here must not come back from the row cache.
	clear(x.w.c.rows)
	x.w.c.rowsEmptied()
	wm, err := x.watermarks()
	if err != nil {
		return err
	}
	deps, err := x.depIDs()
	if err != nil {
		return err
	}
	for _, c := range []struct {
		l      level
		before int64
	}{
		{levelSecond, min(now-r.Seconds.Milliseconds(), wm.second)},
		{levelMinute, min(now-r.Minutes.Milliseconds(), wm.minute)},
		{levelHour, now - r.Hours.Milliseconds()},
	} {
		for _, d := range deps {
			if _, err := x.exec("DELETE FROM "+c.l.table()+" WHERE dep_id = $1 AND start < $2", d, c.before); err != nil {
				return fmt.Errorf("store: expire %s: %w", c.l.table(), err)
			}
		}
	}
	if _, err := x.exec("DELETE FROM data_gaps WHERE gap_end < $1", now-r.Hours.Milliseconds()); err != nil {
		return fmt.Errorf("store: expire data gaps: %w", err)
	}
	if _, err := x.exec("DELETE FROM transitions WHERE at < $1", now-r.Transitions.Milliseconds()); err != nil {
		return fmt.Errorf("store: expire transitions: %w", err)
	}
	if _, err := x.exec("DELETE FROM shadow_transitions WHERE at < $1", now-r.Transitions.Milliseconds()); err != nil {
		return fmt.Errorf("store: expire shadow transitions: %w", err)
	}
	// An alert episode guards against alerting a replayed trip twice; a
	// trip past the transitions' retention is never replayed.
	if _, err := x.exec("DELETE FROM alert_episodes WHERE resolved_ms < $1", now-r.Transitions.Milliseconds()); err != nil {
		return fmt.Errorf("store: expire alert episodes: %w", err)
	}
	if err := x.expireInstanceMinutes(now, r.InstanceMinutes); err != nil {
		return err
	}
	// Agent processes other than an instance's latest, started before the
	// seconds retention: no batch of theirs can still be in flight.
	if _, err := x.exec(`DELETE FROM instance_runs WHERE started_at < $1 AND started_at <>
		(SELECT started_at FROM instances WHERE instances.id = instance_runs.instance_id)`, now-r.Seconds.Milliseconds()); err != nil {
		return fmt.Errorf("store: expire agent runs: %w", err)
	}
	return nil
}
