package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Incidents: written by internal/incident through the writer goroutine,
// read on the read pool. Times are Unix ms; end_ms is NULL while open.

// CreateIncident stores a new incident and returns its ID. The incident's
// ID and Notes are ignored. Its dependency and Start (to the millisecond)
// are the key of its episode: when an incident of that key is stored
// already (a replay after a handover, or two leaders overlapping for a
// moment, found the same episode) nothing is written and the existing
// incident's ID is returned.
func (s *Store) CreateIncident(ctx context.Context, inc cbdash.Incident) (int64, error) {
	args, err := incidentArgs(inc)
	if err != nil {
		return 0, err
	}
	var id int64
	// shared: a leader's row, made once by its unique key whatever runs
	// beside it (leaderShared).
	err = s.w.do(ctx, &op{shared: leaderShared, run: func(x *wtx) error {
		id = 0
		row, err := x.queryRow(`INSERT INTO incidents (service, breaker, start_ms, end_ms, instances, opens, first_instance, first_cause, episode_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (service, breaker, episode_ms) DO NOTHING RETURNING id`, append(args, args[2])...)
		if err != nil {
			return err
		}
		err = row.Scan(&id)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		row, err = x.queryRow(`SELECT id FROM incidents WHERE service = $1 AND breaker = $2 AND episode_ms = $3`, args[0], args[1], args[2])
		if err != nil {
			return err
		}
		return row.Scan(&id)
	}})
	if err != nil {
		return 0, fmt.Errorf("store: create incident: %w", err)
	}
	return id, nil
}

// UpdateIncident rewrites an incident's end, instances, opens and first
// trip. An unknown ID is an error wrapping cbdash.ErrNotFound.
func (s *Store) UpdateIncident(ctx context.Context, inc cbdash.Incident) error {
	args, err := incidentArgs(inc)
	if err != nil {
		return err
	}
	err = s.w.do(ctx, &op{shared: leaderShared, run: func(x *wtx) error {
		res, err := x.exec(`UPDATE incidents SET service = $1, breaker = $2, start_ms = $3, end_ms = $4, instances = $5, opens = $6,
			first_instance = $7, first_cause = $8 WHERE id = $9`, append(args, inc.ID)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("incident %d: %w", inc.ID, cbdash.ErrNotFound)
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("store: update incident: %w", err)
	}
	return nil
}

func incidentArgs(inc cbdash.Incident) ([]any, error) {
	instances := inc.Instances
	if instances == nil {
		instances = []string{}
	}
	insts, err := json.Marshal(instances)
	if err != nil {
		return nil, fmt.Errorf("store: incident instances: %w", err)
	}
	cause, err := json.Marshal(inc.FirstCause)
	if err != nil {
		return nil, fmt.Errorf("store: incident cause: %w", err)
	}
	var end any
	if !inc.Open && !inc.End.IsZero() {
		end = inc.End.UnixMilli()
	}
	return []any{inc.Service, inc.Breaker, inc.Start.UnixMilli(), end, string(insts), inc.Opens, inc.FirstInstance, string(cause)}, nil
}

const incidentColumns = `id, service, breaker, start_ms, end_ms, instances, opens, first_instance, first_cause`

func scanIncident(sc interface{ Scan(...any) error }) (cbdash.Incident, error) {
	var (
		inc          cbdash.Incident
		start        int64
		end          sql.NullInt64
		insts, cause string
	)
	if err := sc.Scan(&inc.ID, &inc.Service, &inc.Breaker, &start, &end, &insts, &inc.Opens, &inc.FirstInstance, &cause); err != nil {
		return inc, err
	}
	inc.Start = time.UnixMilli(start).UTC()
	inc.Open = !end.Valid
	if end.Valid {
		inc.End = time.UnixMilli(end.Int64).UTC()
	}
	if err := json.Unmarshal([]byte(insts), &inc.Instances); err != nil {
		return inc, fmt.Errorf("incident %d instances: %w", inc.ID, err)
	}
	if err := json.Unmarshal([]byte(cause), &inc.FirstCause); err != nil {
		return inc, fmt.Errorf("incident %d cause: %w", inc.ID, err)
	}
	return inc, nil
}

// Incident returns one incident with its notes, oldest first. An unknown
// ID is an error wrapping cbdash.ErrNotFound.
func (s *Store) Incident(ctx context.Context, id int64) (cbdash.Incident, error) {
	inc, err := scanIncident(s.rdb.QueryRowContext(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return inc, fmt.Errorf("store: incident %d: %w", id, cbdash.ErrNotFound)
	}
	if err != nil {
		return inc, fmt.Errorf("store: incident %d: %w", id, err)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, incident_id, at_ms, author, text FROM incident_notes
		WHERE incident_id = $1 ORDER BY at_ms, id`, id)
	if err != nil {
		return inc, fmt.Errorf("store: incident %d notes: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n cbdash.IncidentNote
		var at int64
		if err := rows.Scan(&n.ID, &n.IncidentID, &at, &n.Author, &n.Text); err != nil {
			return inc, fmt.Errorf("store: incident %d notes: %w", id, err)
		}
		n.At = time.UnixMilli(at).UTC()
		inc.Notes = append(inc.Notes, n)
	}
	if err := rows.Err(); err != nil {
		return inc, fmt.Errorf("store: incident %d notes: %w", id, err)
	}
	return inc, nil
}

// Incidents lists incidents matching q, newest start first, without notes.
func (s *Store) Incidents(ctx context.Context, q cbdash.IncidentQuery) ([]cbdash.Incident, error) {
	var where []string
	var args params
	if q.Service != "" {
		where = append(where, "service = "+args.add(q.Service))
	}
	if q.Breaker != "" {
		where = append(where, "breaker = "+args.add(q.Breaker))
	}
	if !q.From.IsZero() {
		where = append(where, "(end_ms IS NULL OR end_ms >= "+args.add(q.From.UnixMilli())+")")
	}
	if !q.To.IsZero() {
		where = append(where, "start_ms < "+args.add(q.To.UnixMilli()))
	}
	if q.OpenOnly {
		where = append(where, "end_ms IS NULL")
	}
	query := `SELECT ` + incidentColumns + ` FROM incidents`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 200
	}
	query += " ORDER BY start_ms DESC, id DESC LIMIT " + args.add(limit)
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: incidents: %w", err)
	}
	defer rows.Close()
	var out []cbdash.Incident
	for rows.Next() {
		inc, err := scanIncident(rows)
		if err != nil {
			return nil, fmt.Errorf("store: incidents: %w", err)
		}
		out = append(out, inc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: incidents: %w", err)
	}
	return out, nil
}

// AddIncidentNote stores an operator's note and returns it with its ID. An
// empty text is an error wrapping cbdash.ErrInvalid; an unknown incident
// one wrapping cbdash.ErrNotFound.
func (s *Store) AddIncidentNote(ctx context.Context, n cbdash.IncidentNote) (cbdash.IncidentNote, error) {
	if strings.TrimSpace(n.Text) == "" {
		return n, fmt.Errorf("store: note text is empty: %w", cbdash.ErrInvalid)
	}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow(`SELECT 1 FROM incidents WHERE id = $1`, n.IncidentID)
		if err != nil {
			return err
		}
		var one int
		if err := row.Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("incident %d: %w", n.IncidentID, cbdash.ErrNotFound)
		} else if err != nil {
			return err
		}
		n.ID, err = x.insertID(`INSERT INTO incident_notes (incident_id, at_ms, author, text) VALUES ($1, $2, $3, $4)`,
			n.IncidentID, n.At.UnixMilli(), n.Author, n.Text)
		return err
	}})
	if err != nil {
		return n, fmt.Errorf("store: add incident note: %w", err)
	}
	n.At = time.UnixMilli(n.At.UnixMilli()).UTC()
	return n, nil
}

// leaderShared marks the writes of the incident leader that need no
// exclusive lock on PostgreSQL (doc.go, Several writers): an incident
// made by its episode's unique key (INSERT ... ON CONFLICT DO NOTHING),
// rewritten by its id, and the leaders' marks, moved forward only. No
// batch writes their rows, and two leaders overlapping for a moment meet
// on the rows themselves, as they did in turns: one incident an episode,
// the last rewrite standing, the furthest mark. Beside the other
// collectors' batch groups, a trip's incident no longer waits for them,
// nor splits its own collector's group in two transactions.
const leaderShared = true
