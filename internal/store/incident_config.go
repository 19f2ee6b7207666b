package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// SaveConfigChange appends a configuration change and returns its ID.
func (s *Store) SaveConfigChange(ctx context.Context, c cbdash.ConfigChange) (int64, error) {
	prev, err := json.Marshal(c.Previous)
	if err != nil {
		return 0, fmt.Errorf("store: config change: %w", err)
	}
	cur, err := json.Marshal(c.Config)
	if err != nil {
		return 0, fmt.Errorf("store: config change: %w", err)
	}
	var id int64
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		var err error
		id, err = x.insertID(`INSERT INTO config_changes (service, breaker, instance, at_ms, previous, config) VALUES ($1, $2, $3, $4, $5, $6)`,
			c.Service, c.Breaker, c.Instance, c.At.UnixMilli(), string(prev), string(cur))
		return err
	}})
	if err != nil {
		return 0, fmt.Errorf("store: save config change: %w", err)
	}
	return id, nil
}

// ConfigChanges returns the configuration changes of dependency k within
// [from, to), oldest first.
func (s *Store) ConfigChanges(ctx context.Context, k cbdash.DependencyKey, from, to time.Time) ([]cbdash.ConfigChange, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, instance, at_ms, previous, config FROM config_changes
		WHERE service = $1 AND breaker = $2 AND at_ms >= $3 AND at_ms < $4 ORDER BY at_ms, id`, k.Service, k.Breaker, from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: config changes: %w", err)
	}
	defer rows.Close()
	var out []cbdash.ConfigChange
	for rows.Next() {
		c := cbdash.ConfigChange{DependencyKey: k}
		var at int64
		var prev, cur string
		if err := rows.Scan(&c.ID, &c.Instance, &at, &prev, &cur); err != nil {
			return nil, fmt.Errorf("store: config changes: %w", err)
		}
		c.At = time.UnixMilli(at).UTC()
		if err := json.Unmarshal([]byte(prev), &c.Previous); err != nil {
			return nil, fmt.Errorf("store: config change %d: %w", c.ID, err)
		}
		if err := json.Unmarshal([]byte(cur), &c.Config); err != nil {
			return nil, fmt.Errorf("store: config change %d: %w", c.ID, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: config changes: %w", err)
	}
	return out, nil
}
