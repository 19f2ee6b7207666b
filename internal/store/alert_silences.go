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

// Silences, acknowledgements and the flapping message of alerts
// (internal/alert, issue 33). Times are Unix ms.

// ClaimFlapping records that the flapping message of the alert of rule
// and subject, flapping since since, is to be sent, with its summary
// (what the message says now): claimed is true once per firing episode
// (the first leader to claim it), false when it was claimed already, the
// alert is not firing or it is acknowledged. A claimed message is
// pending (FiringAlert.FlappingPending) until AckFiringAlert of
// cbdash.AlertFlapping.
func (s *Store) ClaimFlapping(ctx context.Context, ruleID int64, subject string, since time.Time, summary string) (bool, error) {
	var claimed bool
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE alert_firing SET flapping_ms = $1, flapping_pending = 1, flapping_now = $2 WHERE rule_id = $3 AND subject = $4
			AND firing = 1 AND flapping_ms = 0 AND acked_ms = 0`, max(since.UnixMilli(), 1), summary, ruleID, subject)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		claimed = n > 0
		return err
	}})
	if err != nil {
		return false, fmt.Errorf("store: claim flapping: %w", err)
	}
	return claimed, nil
}

// AckAlert records that by acknowledged the firing alert of rule and
// subject at at. An alert that is not firing is an error wrapping
// cbdash.ErrNotFound; one acknowledged already keeps its first
// acknowledgement (no error).
func (s *Store) AckAlert(ctx context.Context, ruleID int64, subject, by string, at time.Time) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE alert_firing SET acked_by = $1, acked_ms = $2 WHERE rule_id = $3 AND subject = $4 AND firing = 1 AND acked_ms = 0`,
			by, max(at.UnixMilli(), 1), ruleID, subject)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		row, err := x.queryRow(`SELECT count(*) FROM alert_firing WHERE rule_id = $1 AND subject = $2 AND firing = 1`, ruleID, subject)
		if err != nil {
			return err
		}
		var n int64
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no alert of rule %d is firing on %s: %w", ruleID, subject, cbdash.ErrNotFound)
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("store: acknowledge alert: %w", err)
	}
	return nil
}

// validateSilence checks a silence to create; errors wrap
// cbdash.ErrInvalid naming the field.
func validateSilence(sl cbdash.Silence) error {
	bad := func(msg string) error { return fmt.Errorf("store: silence: %s: %w", msg, cbdash.ErrInvalid) }
	switch {
	case sl.Matchers.Empty():
		return bad("matchers: name a service, a breaker or a label (a silence of everything is refused)")
	case strings.TrimSpace(sl.Reason) == "":
		return bad("reason is required")
	case strings.TrimSpace(sl.CreatedBy) == "":
		return bad("created_by is required")
	case !sl.EndsAt.After(sl.StartsAt):
		return bad("ends_at must be after starts_at")
	}
	return nil
}

// CreateSilence validates and stores a silence (its ID is ignored; a
// zero StartsAt is CreatedAt, a zero CreatedAt the store clock's now) and
// returns it as stored. Errors wrap cbdash.ErrInvalid for a bad silence.
func (s *Store) CreateSilence(ctx context.Context, sl cbdash.Silence) (cbdash.Silence, error) {
	if sl.CreatedAt.IsZero() {
		sl.CreatedAt = s.opts.Clock.Now()
	}
	if sl.StartsAt.IsZero() {
		sl.StartsAt = sl.CreatedAt
	}
	sl.CreatedAt, sl.StartsAt, sl.EndsAt = toMs(sl.CreatedAt), toMs(sl.StartsAt), toMs(sl.EndsAt)
	if err := validateSilence(sl); err != nil {
		return sl, err
	}
	m, err := json.Marshal(sl.Matchers)
	if err != nil {
		return sl, fmt.Errorf("store: create silence: %w", err)
	}
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		var err error
		sl.ID, err = x.insertID(`INSERT INTO alert_silences (matchers, reason, created_by, created_ms, starts_ms, ends_ms)
			VALUES ($1, $2, $3, $4, $5, $6)`, string(m), sl.Reason, sl.CreatedBy, sl.CreatedAt.UnixMilli(), sl.StartsAt.UnixMilli(), sl.EndsAt.UnixMilli())
		return err
	}})
	if err != nil {
		return sl, fmt.Errorf("store: create silence: %w", err)
	}
	return sl, nil
}

func toMs(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

// ExpireSilence ends silence id at at, recording by; one ended already
// keeps its end. An unknown ID is an error wrapping cbdash.ErrNotFound.
func (s *Store) ExpireSilence(ctx context.Context, id int64, by string, at time.Time) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE alert_silences SET expired_by = $1, expired_ms = $2 WHERE id = $3 AND expired_ms = 0 AND ends_ms > $2`,
			by, at.UnixMilli(), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		row, err := x.queryRow(`SELECT count(*) FROM alert_silences WHERE id = $1`, id)
		if err != nil {
			return err
		}
		var n int64
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("silence %d: %w", id, cbdash.ErrNotFound)
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("store: expire silence: %w", err)
	}
	return nil
}

const silenceColumns = `id, matchers, reason, created_by, created_ms, starts_ms, ends_ms, expired_by, expired_ms`

// Silences returns the silences that end after since (every one when
// since is zero), newest first, at most limit (0 = 200).
func (s *Store) Silences(ctx context.Context, since time.Time, limit int) ([]cbdash.Silence, error) {
	if limit <= 0 {
		limit = 200
	}
	var from int64 = -1 << 62
	if !since.IsZero() {
		from = since.UnixMilli()
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+silenceColumns+` FROM alert_silences
		WHERE ends_ms > $1 AND (expired_ms = 0 OR expired_ms > $1) ORDER BY id DESC LIMIT $2`, from, limit)
	if err != nil {
		return nil, fmt.Errorf("store: silences: %w", err)
	}
	defer rows.Close()
	var out []cbdash.Silence
	for rows.Next() {
		sl, err := scanSilence(rows)
		if err != nil {
			return nil, fmt.Errorf("store: silences: %w", err)
		}
		out = append(out, sl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: silences: %w", err)
	}
	return out, nil
}

// Silence returns one silence; an unknown ID is an error wrapping
// cbdash.ErrNotFound.
func (s *Store) Silence(ctx context.Context, id int64) (cbdash.Silence, error) {
	sl, err := scanSilence(s.rdb.QueryRowContext(ctx, `SELECT `+silenceColumns+` FROM alert_silences WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return sl, fmt.Errorf("store: silence %d: %w", id, cbdash.ErrNotFound)
	}
	if err != nil {
		return sl, fmt.Errorf("store: silence %d: %w", id, err)
	}
	return sl, nil
}

func scanSilence(sc interface{ Scan(...any) error }) (cbdash.Silence, error) {
	var sl cbdash.Silence
	var m string
	var created, starts, ends, expired int64
	if err := sc.Scan(&sl.ID, &m, &sl.Reason, &sl.CreatedBy, &created, &starts, &ends, &sl.ExpiredBy, &expired); err != nil {
		return sl, err
	}
	if err := json.Unmarshal([]byte(m), &sl.Matchers); err != nil {
		return sl, fmt.Errorf("silence %d matchers: %w", sl.ID, err)
	}
	sl.CreatedAt, sl.StartsAt, sl.EndsAt, sl.ExpiredAt = fromMs(created), fromMs(starts), fromMs(ends), fromMs(expired)
	return sl, nil
}
