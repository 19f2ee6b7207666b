package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/cbdash/cbdash"
)

// servedHaving is the condition of a window bucket in which fallbacks
// ran under a breaker that rejected calls (cbdash.NextFallbackRun's rule,
// summed over the instances of the bucket: over its rows, one per writer
// that wrote into it), and servedAny the rows that may count towards it.
const (
	servedHaving = `SUM(rejected_open + rejected_half_open + rejected_forced + rejected_bulkhead + rejected_ramp) > 0
	AND SUM(fallback_success + fallback_failure) > 0`
	servedAny = `(rejected_open + rejected_half_open + rejected_forced + rejected_bulkhead + rejected_ramp + fallback_success + fallback_failure) > 0`
)

// FallbackFreshness returns, for every dependency some instance declares,
// when it was first known and when its fallbacks last served rejected
// calls, from the stored history (so a restart keeps it): the end of the
// last bucket, at the finest level kept, in which the dependency both
// rejected calls and counted fallbacks. Sorted by service and breaker.
// A few indexed reads per dependency (see lastServed).
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
// which fallbacks served rejected calls; 0 when none is kept. Each level
// is read from the watermark of the finer one (before it, its buckets
// are rolled into the coarser level), and a coarse bucket found is
// narrowed to the finest rows still kept within it (minutes are kept
// longer than seconds, hours longer than minutes).
func lastServed(ctx context.Context, tx *readTx, dep int64, wm watermarks) (int64, error) {
	var last int64
	for _, lv := range []struct {
		l    level
		from int64
	}{{levelHour, 0}, {levelMinute, wm.minute}, {levelSecond, wm.second}} {
		start, ok, err := maxServed(ctx, tx, lv.l, dep, lv.from, math.MaxInt64)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		end, err := narrow(ctx, tx, lv.l, dep, start)
		if err != nil {
			return 0, err
		}
		last = max(last, end)
	}
	return last, nil
}

// narrow is the end of bucket start of level l, or of the last finer
// bucket within it in which fallbacks served rejected calls.
func narrow(ctx context.Context, tx *readTx, l level, dep, start int64) (int64, error) {
	for l > levelSecond {
		finer, ok, err := maxServed(ctx, tx, l-1, dep, start, start+l.width())
		if err != nil || !ok {
			return start + l.width(), err
		}
		l, start = l-1, finer
	}
	return start + l.width(), nil
}

// maxServed is the start of dependency dep's last bucket of level l in
// [from, to) in which fallbacks served rejected calls.
func maxServed(ctx context.Context, tx *readTx, l level, dep, from, to int64) (int64, bool, error) {
	var start int64
	q := "SELECT start FROM " + l.table() + " WHERE dep_id = $1 AND start >= $2 AND start < $3 AND " + servedAny +
		" GROUP BY start HAVING " + servedHaving + " ORDER BY start DESC LIMIT 1"
	switch err := tx.QueryRowContext(ctx, q, dep, from, to).Scan(&start); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return start, true, nil
}
