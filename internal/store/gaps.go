package store

import (
	"context"
	"fmt"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// maxGaps caps the gaps one Gaps call returns.
const maxGaps = 10_000

// saveGaps records the lost spans of batch b (protocol Dropped.Lost) of
// one instance as gaps of their dependencies.
func (x *wtx) saveGaps(service, instance string, d *protocol.Dropped, now int64) error {
	if d == nil {
		return nil
	}
	for _, l := range d.Lost {
		dep, err := x.dep(service, l.Breaker)
		if err != nil {
			return err
		}
		if _, err := x.exec(`INSERT INTO data_gaps (dep_id, instance, gap_start, gap_end, calls, received_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, dep, instance, l.Start, l.End, l.Calls, now); err != nil {
			return fmt.Errorf("store: save data gap: %w", err)
		}
	}
	return nil
}

// Gaps returns the gaps of one dependency's history that overlap
// [q.From, q.To): time whose window reports an instance's agent dropped
// under memory pressure, with the calls they counted, sorted by start
// (at most 10,000, the earliest). History has no data of that instance
// there: a chart draws a gap ("data lost"), not a dip to zero. Gaps are
// kept as long as hour buckets. Errors: cbdash.ErrInvalid for an empty
// service or breaker or To not after From; ctx's or a wrapped driver
// error.
func (s *Store) Gaps(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Gap, error) {
	if err := checkNames("service", q.Service, "breaker", q.Breaker); err != nil {
		return nil, err
	}
	if !q.To.After(q.From) {
		return nil, fmt.Errorf("%w: to must be after from", cbdash.ErrInvalid)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT g.instance, g.gap_start, g.gap_end, g.calls FROM data_gaps g
		JOIN dependencies d ON d.id = g.dep_id
		WHERE d.service = $1 AND d.breaker = $2 AND g.gap_end > $3 AND g.gap_start < $4
		ORDER BY g.gap_start, g.instance LIMIT $5`, q.Service, q.Breaker, ms(q.From), ms(q.To), maxGaps)
	if err != nil {
		return nil, fmt.Errorf("store: gaps: %w", err)
	}
	defer rows.Close()
	gaps := []cbdash.Gap{}
	for rows.Next() {
		var g cbdash.Gap
		var from, to int64
		if err := rows.Scan(&g.Instance, &from, &to, &g.Calls); err != nil {
			return nil, fmt.Errorf("store: gaps: %w", err)
		}
		g.From, g.To = fromMs(from), fromMs(to)
		gaps = append(gaps, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: gaps: %w", err)
	}
	return gaps, nil
}
