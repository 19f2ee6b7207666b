package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// maxCommands caps CommandQuery.Limit.
const maxCommands = 5000

// CreateCommand records a command and its targets (the audit log entry)
// before it is sent. Commands and targets are never deleted. Errors:
// cbdash.ErrInvalid for a missing id, service or breaker, an unknown
// action, a target without an instance or with an unknown status;
// cbdash.ErrConflict when the id exists; ErrClosed, ctx's or a wrapped
// driver error.
func (s *Store) CreateCommand(ctx context.Context, c cbdash.Command) error {
	if err := checkNames("id", c.ID, "service", c.Service, "breaker", c.Breaker); err != nil {
		return err
	}
	if !protocol.ValidCommandAction(c.Action) {
		return fmt.Errorf("%w: unknown action %q", cbdash.ErrInvalid, c.Action)
	}
	for _, t := range c.Targets {
		if err := checkTarget(t); err != nil {
			return err
		}
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT count(*) FROM commands WHERE id = $1", c.ID)
		if err != nil {
			return err
		}
		var n int
		if err := q.Scan(&n); err != nil {
			return fmt.Errorf("store: create command: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("%w: command %q exists", cbdash.ErrConflict, c.ID)
		}
		if _, err := x.exec(insertCommand, c.ID, c.Service, c.Breaker, c.Action, c.Instance, c.Share,
			c.TTL.Milliseconds(), c.Reason, c.Actor, ms(c.IssuedAt), ms(c.ExpiresAt), c.HoldID); err != nil {
			return fmt.Errorf("store: create command: %w", err)
		}
		for _, t := range c.Targets {
			if err := x.putTarget(c.ID, t); err != nil {
				return err
			}
		}
		return nil
	}})
}

// insertCommand records a command (its targets are rows of their own).
const insertCommand = `INSERT INTO commands (id, service, breaker, action, instance, share, ttl_ms, reason, actor, issued_at, expires_at, hold_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

func checkTarget(t cbdash.CommandTarget) error {
	if err := checkNames("target instance", t.Instance); err != nil {
		return err
	}
	switch t.Status {
	case cbdash.TargetPending, cbdash.TargetApplied, cbdash.TargetFailed, cbdash.TargetExpired:
		return nil
	}
	return fmt.Errorf("%w: target status %q is unknown", cbdash.ErrInvalid, t.Status)
}

func (x *wtx) putTarget(id string, t cbdash.CommandTarget) error {
	if _, err := x.exec(insertTarget, id, t.Instance, t.Status, t.State, t.Error, ms(t.At)); err != nil {
		return fmt.Errorf("store: command target: %w", err)
	}
	return nil
}

// insertTarget records one command target (upsertTargets).
var insertTarget = upsertTargets(placeholders(1, 6, ""))

// SetCommandTarget records (or replaces) the target t.Instance of command
// commandID: its status, resulting state, error and time. Errors:
// cbdash.ErrNotFound for an unknown command, cbdash.ErrInvalid for a bad
// target, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) SetCommandTarget(ctx context.Context, commandID string, t cbdash.CommandTarget) error {
	if err := checkTarget(t); err != nil {
		return err
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT count(*) FROM commands WHERE id = $1", commandID)
		if err != nil {
			return err
		}
		var n int
		if err := q.Scan(&n); err != nil {
			return fmt.Errorf("store: command target: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%w: command %q", cbdash.ErrNotFound, commandID)
		}
		return x.putTarget(commandID, t)
	}})
}

const commandColumns = `id, service, breaker, action, instance, share, ttl_ms, reason, actor, issued_at, expires_at, hold_id`

func scanCommand(sc interface{ Scan(...any) error }) (cbdash.Command, error) {
	var c cbdash.Command
	var ttl, issued, expires int64
	err := sc.Scan(&c.ID, &c.Service, &c.Breaker, &c.Action, &c.Instance, &c.Share, &ttl, &c.Reason, &c.Actor, &issued, &expires, &c.HoldID)
	c.TTL = time.Duration(ttl) * time.Millisecond
	c.IssuedAt, c.ExpiresAt = fromMs(issued), fromMs(expires)
	c.Targets = []cbdash.CommandTarget{}
	return c, err
}

// Command returns one command with its targets (sorted by instance).
// Errors: cbdash.ErrNotFound, ctx's or a wrapped driver error.
func (s *Store) Command(ctx context.Context, id string) (cbdash.Command, error) {
	c, err := scanCommand(s.rdb.QueryRowContext(ctx, "SELECT "+commandColumns+" FROM commands WHERE id = $1", id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cbdash.Command{}, fmt.Errorf("%w: command %q", cbdash.ErrNotFound, id)
	case err != nil:
		return cbdash.Command{}, fmt.Errorf("store: command: %w", err)
	}
	cmds := []cbdash.Command{c}
	if err := s.loadTargets(ctx, cmds); err != nil {
		return cbdash.Command{}, err
	}
	return cmds[0], nil
}

// Commands returns the commands matching q, newest first, with their
// targets. Empty fields match all; Limit 0 means 200 and is capped at
// 5,000. Errors: cbdash.ErrInvalid for a negative limit, ctx's or a
// wrapped driver error.
func (s *Store) Commands(ctx context.Context, q cbdash.CommandQuery) ([]cbdash.Command, error) {
	if q.Limit < 0 {
		return nil, fmt.Errorf("%w: limit is negative", cbdash.ErrInvalid)
	}
	limit := q.Limit
	if limit == 0 {
		limit = 200
	}
	limit = min(limit, maxCommands)
	var where []string
	var args params
	if q.Service != "" {
		where = append(where, "service = "+args.add(q.Service))
	}
	if q.Breaker != "" {
		where = append(where, "breaker = "+args.add(q.Breaker))
	}
	query := "SELECT " + commandColumns + " FROM commands"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY issued_at DESC, id DESC LIMIT " + args.add(limit)
	return s.queryCommands(ctx, query, args...)
}

// PendingCommands returns the commands of service with a pending target
// for instance that have not expired at now (ExpiresAt zero or after
// now), oldest first: what to deliver when the instance (re)connects.
// Errors: ctx's or a wrapped driver error.
func (s *Store) PendingCommands(ctx context.Context, service, instance string, now time.Time) ([]cbdash.Command, error) {
	return s.queryCommands(ctx, `SELECT `+prefixed("c.", commandColumns)+` FROM command_targets t
		JOIN commands c ON c.id = t.command_id
		WHERE t.instance = $1 AND t.status = $2 AND c.service = $3 AND (c.expires_at = 0 OR c.expires_at > $4)
		ORDER BY c.issued_at, c.id`, instance, cbdash.TargetPending, service, ms(now))
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

func (s *Store) queryCommands(ctx context.Context, query string, args ...any) ([]cbdash.Command, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: commands: %w", err)
	}
	defer rows.Close()
	out := []cbdash.Command{}
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("store: commands: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: commands: %w", err)
	}
	rows.Close()
	if err := s.loadTargets(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// loadTargets fills the targets of cmds in one query.
func (s *Store) loadTargets(ctx context.Context, cmds []cbdash.Command) error {
	if len(cmds) == 0 {
		return nil
	}
	idx := make(map[string]int, len(cmds))
	args := make([]any, len(cmds))
	for i, c := range cmds {
		idx[c.ID] = i
		args[i] = c.ID
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT command_id, instance, status, state, error, at FROM command_targets
		WHERE command_id IN (SELECT value FROM `+s.rdb.d.jsonEach("$1")+`) ORDER BY command_id, instance`, jsonStrings(args))
	if err != nil {
		return fmt.Errorf("store: command targets: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var t cbdash.CommandTarget
		var at int64
		if err := rows.Scan(&id, &t.Instance, &t.Status, &t.State, &t.Error, &at); err != nil {
			return fmt.Errorf("store: command targets: %w", err)
		}
		t.At = fromMs(at)
		if i, ok := idx[id]; ok {
			cmds[i].Targets = append(cmds[i].Targets, t)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: command targets: %w", err)
	}
	return nil
}
