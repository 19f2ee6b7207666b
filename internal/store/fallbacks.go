package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cbdash/cbdash"
)

// servedWhere is the condition of a window bucket in which fallbacks ran
// under a breaker that rejected calls (cbdash.NextFallbackRun's rule,
// summed over the instances of the bucket).
const servedWhere = `(rejected_open + rejected_half_open + rejected_forced + rejected_bulkhead + rejected_ramp) > 0
	AND (fallback_success + fallback_failure) > 0`

// FallbackFreshness returns, for every dependency some instance declares,
// when it was first known and when its fallbacks last served rejected
// calls, from the stored history (so a restart keeps it): the end of the
// last bucket, at the finest level kept, in which the dependency both
// rejected calls and counted fallbacks. Sorted by service and breaker.
// Each level is read from where the next finer one stops being complete
// (the rollup watermarks), one indexed read per dependency and level.
// Errors: ctx's or a wrapped driver error.
func (s *Store) FallbackFreshness(ctx context.Context) ([]cbdash.FallbackFreshness, error) {
	tx, err := s.rdb.snapshot(ctx) // the watermarks and the rows of one snapshot
	if err != nil {
		return nil, fmt.Errorf("store: fallback freshness: %w", err)
	}
	defer tx.Rollback()
	out, ids, err := knownBreakers(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("store: fallback freshness: %w", err)
	}
	var wm watermarks
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT done_until FROM rollups WHERE level = 'second'),
		(SELECT done_until FROM rollups WHERE level = 'minute')`).Scan(&wm.second, &wm.minute); err != nil {
		return nil, fmt.Errorf("store: fallback freshness: %w", err)
	}
	for i := range out {
		if ids[i] == 0 {
			continue // declared, never reported a window
		}
		last, err := lastServed(ctx, tx, ids[i], wm)
		if err != nil {
			return nil, fmt.Errorf("store: fallback freshness of %s: %w", out[i].DependencyKey, err)
		}
		out[i].LastServed = fromMs(last)
	}
	return out, nil
}

// knownBreakers returns every (service, breaker) some instance declares,
// with the first_seen of its earliest instance and its dependencies row
// (0 = none yet).
func knownBreakers(ctx context.Context, tx *readTx) ([]cbdash.FallbackFreshness, []int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT s.name, b.name, MIN(i.first_seen), COALESCE(MAX(d.id), 0)
		FROM breakers b JOIN instances i ON i.id = b.instance_id JOIN services s ON s.id = i.service_id
		LEFT JOIN dependencies d ON d.service = s.name AND d.breaker = b.name
		GROUP BY s.name, b.name ORDER BY s.name, b.name`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []cbdash.FallbackFreshness
	var ids []int64
	for rows.Next() {
		var f cbdash.FallbackFreshness
		var known, id int64
		if err := rows.Scan(&f.Service, &f.Breaker, &known, &id); err != nil {
			return nil, nil, err
		}
		f.KnownSince = fromMs(known)
		out = append(out, f)
		ids = append(ids, id)
	}
	return out, ids, rows.Err()
}

// lastServed is the end (Unix ms) of dependency dep's last bucket in
// which fallbacks served rejected calls; 0 when none is kept.
func lastServed(ctx context.Context, tx *readTx, dep int64, wm watermarks) (int64, error) {
	var last int64
	for _, lv := range []struct {
		l    level
		from int64
	}{{levelHour, 0}, {levelMinute, wm.minute}, {levelSecond, wm.second}} {
		var start sql.NullInt64
		q := "SELECT MAX(start) FROM " + lv.l.table() + " WHERE dep_id = $1 AND start >= $2 AND " + servedWhere
		if err := tx.QueryRowContext(ctx, q, dep, lv.from).Scan(&start); err != nil {
			return 0, err
		}
		if start.Valid {
			last = max(last, start.Int64+lv.l.width())
		}
	}
	return last, nil
}
