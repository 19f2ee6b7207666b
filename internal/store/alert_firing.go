package store

import (
	"context"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// The firing state of alerts (internal/alert), one row per rule and
// subject while an alert fires or its resolve is still to be delivered.

// PutFiringAlert inserts or replaces the state of one alert.
func (s *Store) PutFiringAlert(ctx context.Context, a cbdash.FiringAlert) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		_, err := x.exec(`INSERT INTO alert_firing (rule_id, subject, firing, since_ms, detail, pending) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (rule_id, subject) DO UPDATE SET firing = excluded.firing, since_ms = excluded.since_ms,
			detail = excluded.detail, pending = excluded.pending`,
			a.RuleID, a.Subject, a.Firing, a.Since.UnixMilli(), a.Detail, a.Pending)
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: put firing alert: %w", err)
	}
	return nil
}

// AckFiringAlert records that the webhook call of event (cbdash.AlertFiring,
// cbdash.AlertResolved or cbdash.AlertFlapping) for one alert completed: a
// delivered firing clears the row's pending event, a delivered resolve
// removes the row, a flapping message is no longer pending. It does
// nothing when the row's pending event is another one by now (the alert
// resolved or fired again meanwhile), so an acknowledgement never
// overwrites a newer state.
func (s *Store) AckFiringAlert(ctx context.Context, ruleID int64, subject, event string) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		var err error
		switch event {
		case cbdash.AlertFiring:
			_, err = x.exec(`UPDATE alert_firing SET pending = '' WHERE rule_id = $1 AND subject = $2 AND pending = $3`, ruleID, subject, event)
		case cbdash.AlertResolved:
			_, err = x.exec(`DELETE FROM alert_firing WHERE rule_id = $1 AND subject = $2 AND pending = $3`, ruleID, subject, event)
		case cbdash.AlertFlapping:
			_, err = x.exec(`UPDATE alert_firing SET flapping_pending = 0 WHERE rule_id = $1 AND subject = $2 AND flapping_pending = 1`, ruleID, subject)
		default:
			err = fmt.Errorf("event %q is not firing, resolved or flapping: %w", event, cbdash.ErrInvalid)
		}
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: ack firing alert: %w", err)
	}
	return nil
}

// DeleteFiringAlerts removes the state of every alert of a rule (a rule
// disabled or deleted: its alerts are forgotten without a resolve).
func (s *Store) DeleteFiringAlerts(ctx context.Context, ruleID int64) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		_, err := x.exec(`DELETE FROM alert_firing WHERE rule_id = $1`, ruleID)
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: delete firing alerts: %w", err)
	}
	return nil
}

// FiringAlerts returns the state of every alert that fired and is not yet
// resolved and delivered, by rule and subject.
func (s *Store) FiringAlerts(ctx context.Context) ([]cbdash.FiringAlert, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT rule_id, subject, firing, since_ms, detail, pending, flapping_ms, acked_by, acked_ms,
		flapping_pending, flapping_now FROM alert_firing ORDER BY rule_id, subject`)
	if err != nil {
		return nil, fmt.Errorf("store: firing alerts: %w", err)
	}
	defer rows.Close()
	var out []cbdash.FiringAlert
	for rows.Next() {
		var a cbdash.FiringAlert
		var since, flapping, acked, flapPending int64
		if err := rows.Scan(&a.RuleID, &a.Subject, &a.Firing, &since, &a.Detail, &a.Pending, &flapping, &a.AckedBy, &acked,
			&flapPending, &a.FlappingNow); err != nil {
			return nil, fmt.Errorf("store: firing alerts: %w", err)
		}
		a.Since = time.UnixMilli(since).UTC()
		a.FlappingSince, a.AckedAt = fromMs(flapping), fromMs(acked)
		a.FlappingPending = flapPending != 0
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: firing alerts: %w", err)
	}
	return out, nil
}
