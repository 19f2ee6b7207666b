package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// FirstSeen is when the store first heard of any instance: the earliest
// first_seen of the known services, the start of the fleet's recorded
// history. Zero when no service is known yet. Errors: ctx's or a wrapped
// driver error.
func (s *Store) FirstSeen(ctx context.Context) (time.Time, error) {
	var v sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT MIN(first_seen) FROM services`).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("store: first seen: %w", err)
	}
	if !v.Valid {
		return time.Time{}, nil
	}
	return fromMs(v.Int64), nil
}
