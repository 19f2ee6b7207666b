package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// maxTransitions caps TransitionQuery.Limit.
const maxTransitions = 10000

// Transitions returns the stored transitions matching q, newest first (by
// the agent's At, then by arrival). Empty fields of q match everything;
// From and To bound At as [From, To); Limit 0 means 500 and is capped at
// 10,000. Errors: cbdash.ErrInvalid for a negative limit, ctx's or a
// wrapped driver error.
func (s *Store) Transitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error) {
	cond, args, err := transitionFilter(q)
	if err != nil {
		return nil, err
	}
	query := `SELECT id, service, instance, breaker, from_state, to_state, at, generation, cause, open_ms, received_at FROM transitions` + cond
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: transitions: %w", err)
	}
	return scanTransitions(rows, []cbdash.TransitionRecord{})
}

// transitionFilter returns the WHERE, ORDER BY and LIMIT clauses of a
// transition query q, and their arguments.
func transitionFilter(q cbdash.TransitionQuery) (string, params, error) {
	if q.Limit < 0 {
		return "", nil, fmt.Errorf("%w: limit is negative", cbdash.ErrInvalid)
	}
	limit := q.Limit
	if limit == 0 {
		limit = 500
	}
	limit = min(limit, maxTransitions)
	var where []string
	var args params
	for _, f := range []struct {
		col, v string
	}{{"service", q.Service}, {"breaker", q.Breaker}, {"instance", q.Instance}} {
		if f.v != "" {
			where = append(where, f.col+" = "+args.add(f.v))
		}
	}
	if !q.From.IsZero() {
		where = append(where, "at >= "+args.add(ms(q.From)))
	}
	if !q.To.IsZero() {
		where = append(where, "at < "+args.add(ms(q.To)))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	cond += " ORDER BY at DESC, id DESC LIMIT " + args.add(limit)
	return cond, args, nil
}

// ShadowTransitions returns the stored would-be transitions of shadow
// configurations (sdk/breaker Config.Shadows; never enforced) matching q,
// newest first, with Shadow set; the same query and limits as
// Transitions. Live transitions are never among them, nor they among
// Transitions'. Errors: cbdash.ErrInvalid for a negative limit, ctx's or
// a wrapped driver error.
func (s *Store) ShadowTransitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error) {
	cond, args, err := transitionFilter(q)
	if err != nil {
		return nil, err
	}
	query := `SELECT id, service, instance, breaker, shadow, from_state, to_state, at, generation, cause, open_ms, received_at FROM shadow_transitions` + cond
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: shadow transitions: %w", err)
	}
	defer rows.Close()
	out := []cbdash.TransitionRecord{}
	for rows.Next() {
		var r cbdash.TransitionRecord
		var gen, received int64
		var cause []byte
		if err := rows.Scan(&r.ID, &r.Service, &r.Instance, &r.Breaker, &r.Shadow, &r.From, &r.To, &r.At, &gen,
			&cause, &r.OpenMillis, &received); err != nil {
			return nil, fmt.Errorf("store: shadow transitions: %w", err)
		}
		r.Generation = uint64(gen)
		r.ReceivedAt = fromMs(received)
		if err := json.Unmarshal(cause, &r.Cause); err != nil {
			return nil, fmt.Errorf("store: shadow transition %d cause: %w", r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: shadow transitions: %w", err)
	}
	return out, nil
}

// scanTransitions reads rows of (id, service, instance, breaker,
// from_state, to_state, at, generation, cause, open_ms, received_at) into
// out, and closes them.
func scanTransitions(rows *sql.Rows, out []cbdash.TransitionRecord) ([]cbdash.TransitionRecord, error) {
	defer rows.Close()
	for rows.Next() {
		var r cbdash.TransitionRecord
		var gen, received int64
		var cause []byte
		if err := rows.Scan(&r.ID, &r.Service, &r.Instance, &r.Breaker, &r.From, &r.To, &r.At, &gen,
			&cause, &r.OpenMillis, &received); err != nil {
			return nil, fmt.Errorf("store: transitions: %w", err)
		}
		r.Generation = uint64(gen)
		r.ReceivedAt = fromMs(received)
		if err := json.Unmarshal(cause, &r.Cause); err != nil {
			return nil, fmt.Errorf("store: transition %d cause: %w", r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: transitions: %w", err)
	}
	return out, nil
}

// OpensSince counts, per dependency, the trips (transitions from closed
// to open; not a failed probe's half_open > open, which continues the same
// open episode, nor an operator's forced_open) whose At is at or after
// since. Dependencies without any are absent from the map. Errors:
// ctx's or a wrapped driver error.
func (s *Store) OpensSince(ctx context.Context, since time.Time) (map[cbdash.DependencyKey]int, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT service, breaker, count(*) FROM transitions
		WHERE at >= $1 AND to_state = $2 AND from_state = $3 GROUP BY service, breaker`, ms(since), protocol.StateOpen, protocol.StateClosed)
	if err != nil {
		return nil, fmt.Errorf("store: opens: %w", err)
	}
	defer rows.Close()
	out := make(map[cbdash.DependencyKey]int)
	for rows.Next() {
		var k cbdash.DependencyKey
		var n int
		if err := rows.Scan(&k.Service, &k.Breaker, &n); err != nil {
			return nil, fmt.Errorf("store: opens: %w", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: opens: %w", err)
	}
	return out, nil
}
