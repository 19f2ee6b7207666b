package store

import (
	"context"
	"fmt"
)

// CommandTargets returns which of ids are commands of service that
// target instance (recorded by CreateCommand or SetCommandTarget,
// whatever their status): the commands the collector sent to it. Errors:
// ctx's or a wrapped driver error.
func (s *Store) CommandTargets(ctx context.Context, service, instance string, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT t.command_id FROM command_targets t JOIN commands c ON c.id = t.command_id
		WHERE t.instance = $1 AND c.service = $2 AND t.command_id IN (SELECT value FROM `+s.rdb.d.jsonEach("$3")+`)`, instance, service, jsonStrings(args))
	if err != nil {
		return nil, fmt.Errorf("store: command targets: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: command targets: %w", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: command targets: %w", err)
	}
	return out, nil
}
