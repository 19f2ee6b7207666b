package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// CreateSchedule records a drill schedule. Its NextRun and Runs are not
// stored. Errors: cbdash.ErrInvalid for a missing id, a bad selector or
// rule, or a zero CreatedAt; cbdash.ErrConflict when the id exists;
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) CreateSchedule(ctx context.Context, d cbdash.DrillSchedule) error {
	if err := checkNames("id", d.ID); err != nil {
		return err
	}
	if err := d.Selector.Validate(); err != nil {
		return err
	}
	if err := d.Rule.Validate(); err != nil {
		return err
	}
	if d.CreatedAt.IsZero() {
		return fmt.Errorf("%w: schedule created_at is required", cbdash.ErrInvalid)
	}
	req, err := json.Marshal(d.HoldRequest)
	if err != nil {
		return fmt.Errorf("%w: schedule request: %v", cbdash.ErrInvalid, err)
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		n, err := x.count("SELECT count(*) FROM drill_schedules WHERE id = $1", d.ID)
		if err != nil {
			return fmt.Errorf("store: create schedule: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("%w: schedule %q exists", cbdash.ErrConflict, d.ID)
		}
		if _, err := x.exec(`INSERT INTO drill_schedules (id, request, service, breaker, rule, actor, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, d.ID, string(req), d.Selector.Service, d.Selector.Breaker, d.Rule.String(),
			d.Actor, ms(d.CreatedAt)); err != nil {
			return fmt.Errorf("store: create schedule: %w", err)
		}
		return nil
	}})
}

// DeleteSchedule records that by deleted schedule id at at, for reason:
// it runs no more (its row and runs stay, the audit trail). It returns
// the schedule as deleted. Errors: cbdash.ErrNotFound for an unknown id,
// cbdash.ErrConflict when it was already deleted; ErrClosed, ctx's or a
// wrapped driver error.
func (s *Store) DeleteSchedule(ctx context.Context, id string, at time.Time, by, reason string) (cbdash.DrillSchedule, error) {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT deleted_at FROM drill_schedules WHERE id = $1", id)
		if err != nil {
			return err
		}
		var deleted int64
		switch err := q.Scan(&deleted); {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: schedule %q", cbdash.ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("store: delete schedule: %w", err)
		case deleted != 0:
			return fmt.Errorf("%w: schedule %q was already deleted at %s", cbdash.ErrConflict, id, fromMs(deleted).Format(time.RFC3339))
		}
		if _, err := x.exec("UPDATE drill_schedules SET deleted_at = $1, deleted_by = $2, delete_reason = $3 WHERE id = $4",
			ms(at), by, reason, id); err != nil {
			return fmt.Errorf("store: delete schedule: %w", err)
		}
		return nil
	}})
	if err != nil {
		return cbdash.DrillSchedule{}, err
	}
	return s.Schedule(ctx, id)
}

const scheduleColumns = `id, request, rule, created_at, deleted_at, deleted_by, delete_reason`

func scanSchedule(sc interface{ Scan(...any) error }) (cbdash.DrillSchedule, error) {
	var d cbdash.DrillSchedule
	var req, rule string
	var created, deleted int64
	if err := sc.Scan(&d.ID, &req, &rule, &created, &deleted, &d.DeletedBy, &d.DeleteReason); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(req), &d.HoldRequest); err != nil {
		return d, fmt.Errorf("request of schedule %q: %w", d.ID, err)
	}
	r, err := cbdash.ParseScheduleRule(rule)
	if err != nil {
		return d, fmt.Errorf("rule of schedule %q: %w", d.ID, err)
	}
	d.Rule, d.CreatedAt, d.DeletedAt = r, fromMs(created), fromMs(deleted)
	d.Runs = []cbdash.ScheduleRun{}
	return d, nil
}

// Schedule returns one schedule with its last 20 runs. Errors:
// cbdash.ErrNotFound, ctx's or a wrapped driver error.
func (s *Store) Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error) {
	d, err := scanSchedule(s.rdb.QueryRowContext(ctx, "SELECT "+scheduleColumns+" FROM drill_schedules WHERE id = $1", id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cbdash.DrillSchedule{}, fmt.Errorf("%w: schedule %q", cbdash.ErrNotFound, id)
	case err != nil:
		return cbdash.DrillSchedule{}, fmt.Errorf("store: schedule: %w", err)
	}
	if d.Runs, err = s.ScheduleRuns(ctx, id, 20); err != nil {
		return cbdash.DrillSchedule{}, err
	}
	return d, nil
}

// Schedules returns the schedules q selects, newest first, each with its
// last q.Runs runs. Errors: cbdash.ErrInvalid for a negative limit, ctx's
// or a wrapped driver error.
func (s *Store) Schedules(ctx context.Context, q cbdash.ScheduleQuery) ([]cbdash.DrillSchedule, error) {
	if q.Limit < 0 || q.Runs < 0 {
		return nil, fmt.Errorf("%w: limit is negative", cbdash.ErrInvalid)
	}
	limit, runs := cmpOr(q.Limit, 200), cmpOr(q.Runs, 5)
	query, args := "SELECT "+scheduleColumns+" FROM drill_schedules", params{}
	if !q.Deleted {
		query += " WHERE deleted_at = 0"
	}
	query += " ORDER BY created_at DESC, id DESC LIMIT " + args.add(min(limit, 1000))
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: schedules: %w", err)
	}
	defer rows.Close()
	out := []cbdash.DrillSchedule{}
	for rows.Next() {
		d, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("store: schedules: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: schedules: %w", err)
	}
	rows.Close()
	for i := range out {
		if out[i].Runs, err = s.ScheduleRuns(ctx, out[i].ID, runs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// ScheduleRuns returns the last limit runs of schedule id, newest due
// first. Errors: ctx's or a wrapped driver error.
func (s *Store) ScheduleRuns(ctx context.Context, id string, limit int) ([]cbdash.ScheduleRun, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+runColumns+` FROM drill_schedule_runs
		WHERE schedule_id = $1 ORDER BY due DESC LIMIT $2`, id, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: schedule runs: %w", err)
	}
	defer rows.Close()
	out := []cbdash.ScheduleRun{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("store: schedule runs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: schedule runs: %w", err)
	}
	return out, nil
}

const runColumns = "schedule_id, due, at, result, hold_id, reason, claimed_by, taken_over_from"

func scanRun(sc interface{ Scan(...any) error }) (cbdash.ScheduleRun, error) {
	var r cbdash.ScheduleRun
	var due, at int64
	err := sc.Scan(&r.ScheduleID, &due, &at, &r.Result, &r.HoldID, &r.Reason, &r.ClaimedBy, &r.TakenOverFrom)
	r.Due, r.At = fromMs(due), fromMs(at)
	return r, err
}

// ClaimScheduleRun records run r (its schedule and due time, when, by
// which collector (ClaimedBy) and how it was taken) unless that due time of that schedule is recorded
// already: of several collectors sharing the database, the one whose
// claim succeeds runs it. Errors: cbdash.ErrConflict when the due time
// was taken already, cbdash.ErrNotFound for an unknown schedule,
// cbdash.ErrInvalid for a zero due time; ErrClosed, ctx's or a wrapped
// driver error.
func (s *Store) ClaimScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error {
	if r.Due.IsZero() || r.ScheduleID == "" {
		return fmt.Errorf("%w: schedule run: schedule id and due are required", cbdash.ErrInvalid)
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		n, err := x.count("SELECT count(*) FROM drill_schedules WHERE id = $1", r.ScheduleID)
		if err != nil {
			return fmt.Errorf("store: claim schedule run: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%w: schedule %q", cbdash.ErrNotFound, r.ScheduleID)
		}
		res, err := x.exec(`INSERT INTO drill_schedule_runs (schedule_id, due, at, result, hold_id, reason, claimed_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (schedule_id, due) DO NOTHING`,
			r.ScheduleID, ms(r.Due), ms(r.At), r.Result, r.HoldID, r.Reason, r.ClaimedBy)
		if err != nil {
			return fmt.Errorf("store: claim schedule run: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: claim schedule run: %w", err)
		} else if n == 0 {
			return fmt.Errorf("%w: schedule %q's run due %s was taken already", cbdash.ErrConflict, r.ScheduleID, r.Due.UTC().Format(time.RFC3339))
		}
		return nil
	}})
}

// TakeOverScheduleRun claims again run r (its schedule and due time),
// for r.ClaimedBy at r.At, when it is still claimed (cbdash.RunClaimed)
// by a claim made at or before staleBefore: the collector that claimed
// it did not finish it within its lease (holds.ScheduleLease). One
// statement replaces exactly that claim, so of several collectors taking
// it over at once one only succeeds (its row's TakenOverFrom names the
// collector whose claim it replaced; returned). Errors:
// cbdash.ErrConflict when the run is finished, or claimed after
// staleBefore (by its claimer, or by a collector that took it over
// first); cbdash.ErrNotFound when it was never claimed; ErrClosed, ctx's
// or a wrapped driver error.
func (s *Store) TakeOverScheduleRun(ctx context.Context, r cbdash.ScheduleRun, staleBefore time.Time) (cbdash.ScheduleRun, error) {
	var out cbdash.ScheduleRun
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE drill_schedule_runs SET at = $1, claimed_by = $2, taken_over_from = claimed_by
			WHERE schedule_id = $3 AND due = $4 AND result = $5 AND at <= $6`,
			ms(r.At), r.ClaimedBy, r.ScheduleID, ms(r.Due), cbdash.RunClaimed, ms(staleBefore))
		if err != nil {
			return fmt.Errorf("store: take over schedule run: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: take over schedule run: %w", err)
		}
		q, err := x.queryRow("SELECT "+runColumns+" FROM drill_schedule_runs WHERE schedule_id = $1 AND due = $2", r.ScheduleID, ms(r.Due))
		if err != nil {
			return err
		}
		cur, err := scanRun(q)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: schedule %q's run due %s", cbdash.ErrNotFound, r.ScheduleID, r.Due.UTC().Format(time.RFC3339))
		case err != nil:
			return fmt.Errorf("store: take over schedule run: %w", err)
		case n == 0:
			return fmt.Errorf("%w: schedule %q's run due %s is %s by %q at %s", cbdash.ErrConflict, r.ScheduleID,
				r.Due.UTC().Format(time.RFC3339), cur.Result, cur.ClaimedBy, cur.At.UTC().Format(time.RFC3339))
		}
		out = cur
		return nil
	}})
	return out, err
}

// FinishScheduleRun records how a run claimed by r.ClaimedBy went: its
// Result, HoldID and Reason replace the claim's. Errors: cbdash.ErrNotFound
// when the run was never claimed; cbdash.ErrConflict when it is finished
// already or claimed by another collector (it took the run over);
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) FinishScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error {
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE drill_schedule_runs SET result = $1, hold_id = $2, reason = $3
			WHERE schedule_id = $4 AND due = $5 AND result = $6 AND claimed_by = $7`,
			r.Result, r.HoldID, r.Reason, r.ScheduleID, ms(r.Due), cbdash.RunClaimed, r.ClaimedBy)
		if err != nil {
			return fmt.Errorf("store: finish schedule run: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: finish schedule run: %w", err)
		} else if n > 0 {
			return nil
		}
		n, err := x.count("SELECT count(*) FROM drill_schedule_runs WHERE schedule_id = $1 AND due = $2", r.ScheduleID, ms(r.Due))
		switch {
		case err != nil:
			return fmt.Errorf("store: finish schedule run: %w", err)
		case n == 0:
			return fmt.Errorf("%w: schedule %q's run due %s", cbdash.ErrNotFound, r.ScheduleID, r.Due.UTC().Format(time.RFC3339))
		}
		return fmt.Errorf("%w: schedule %q's run due %s is finished or claimed by another collector", cbdash.ErrConflict,
			r.ScheduleID, r.Due.UTC().Format(time.RFC3339))
	}})
}
