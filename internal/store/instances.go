package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/cbdash/cbdash"
)

// Instances returns the last known state of every breaker of every
// instance, sorted by service, instance and breaker: labels and
// configuration from the latest hello, State (the latest reported, "" when
// none yet), LastTransition, and LastSeen (the instance's latest hello,
// or its latest batch to within 5 s: a batch writes it at most every 5 s,
// seenEvery). Stale, ConfigDiffers, Last and Held are left zero: they are live
// state the collector derives. Errors: ctx's or a wrapped driver error.
func (s *Store) Instances(ctx context.Context) ([]cbdash.InstanceBreaker, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT sv.name, i.name, i.labels, i.last_seen, b.name, b.config, b.state, b.last_transition
		FROM breakers b JOIN instances i ON i.id = b.instance_id JOIN services sv ON sv.id = i.service_id
		ORDER BY sv.name, i.name, b.name`)
	if err != nil {
		return nil, fmt.Errorf("store: instances: %w", err)
	}
	return scanInstances(rows)
}

// InstancesOf is Instances of one dependency's breakers (sorted by
// instance): the members a collector serves none of, for the pages that
// list them (issue 36). Errors: as Instances'.
func (s *Store) InstancesOf(ctx context.Context, k cbdash.DependencyKey) ([]cbdash.InstanceBreaker, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT sv.name, i.name, i.labels, i.last_seen, b.name, b.config, b.state, b.last_transition
		FROM breakers b JOIN instances i ON i.id = b.instance_id JOIN services sv ON sv.id = i.service_id
		WHERE sv.name = $1 AND b.name = $2 ORDER BY i.name`, k.Service, k.Breaker)
	if err != nil {
		return nil, fmt.Errorf("store: instances of %s: %w", k, err)
	}
	return scanInstances(rows)
}

// InstanceLines is Instances of one instance's breakers (sorted by
// breaker): what a collector an instance moves to knows of it before its
// first report (issue 36). Errors: as Instances'.
func (s *Store) InstanceLines(ctx context.Context, service, instance string) ([]cbdash.InstanceBreaker, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT sv.name, i.name, i.labels, i.last_seen, b.name, b.config, b.state, b.last_transition
		FROM breakers b JOIN instances i ON i.id = b.instance_id JOIN services sv ON sv.id = i.service_id
		WHERE sv.name = $1 AND i.name = $2 ORDER BY b.name`, service, instance)
	if err != nil {
		return nil, fmt.Errorf("store: lines of instance %s/%s: %w", service, instance, err)
	}
	return scanInstances(rows)
}

// scanInstances reads the rows of Instances' query.
func scanInstances(rows *sql.Rows) ([]cbdash.InstanceBreaker, error) {
	defer rows.Close()
	out := []cbdash.InstanceBreaker{}
	for rows.Next() {
		var ib cbdash.InstanceBreaker
		var labels, config string
		var lastSeen, lastTransition int64
		if err := rows.Scan(&ib.Service, &ib.Instance, &labels, &lastSeen, &ib.Breaker, &config, &ib.State, &lastTransition); err != nil {
			return nil, fmt.Errorf("store: instances: %w", err)
		}
		if err := json.Unmarshal([]byte(labels), &ib.Labels); err != nil {
			return nil, fmt.Errorf("store: instance %s labels: %w", ib.Instance, err)
		}
		if len(ib.Labels) == 0 {
			ib.Labels = nil
		}
		if err := json.Unmarshal([]byte(config), &ib.Config); err != nil {
			return nil, fmt.Errorf("store: breaker %s config: %w", ib.Breaker, err)
		}
		ib.LastSeen, ib.LastTransition = fromMs(lastSeen), fromMs(lastTransition)
		out = append(out, ib)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: instances: %w", err)
	}
	return out, nil
}
