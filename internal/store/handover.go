package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cbdash/cbdash"
)

// Handover of the singletons (issue 28): the leader of incident detection
// and of alert delivery records how far it has processed the stored
// transitions (a mark per singleton); the next leader, or the same
// collector after a restart, replays the transitions received after it.
// Replays and overlapping leaders store an incident or an alert once:
// incidents by dependency and episode start (incidents_episode), alerts
// by rule and subject while firing (alert_firing's key) and by the
// resolved episodes kept in alert_episodes.

// LeaderMark returns the mark of singleton name: every transition the
// collector received before it has been processed. ok is false when none
// was ever recorded. Errors: ctx's or a wrapped driver error.
func (s *Store) LeaderMark(ctx context.Context, name string) (mark time.Time, ok bool, err error) {
	var v int64
	err = s.rdb.QueryRowContext(ctx, `SELECT received_ms FROM leader_marks WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: leader mark %s: %w", name, err)
	}
	return fromMs(v), true, nil
}

// SetLeaderMark moves the mark of singleton name forward to at (Unix ms);
// an earlier at leaves it where it is, so two leaders overlapping for a
// moment never move it back. Errors: ctx's or a wrapped driver error.
func (s *Store) SetLeaderMark(ctx context.Context, name string, at time.Time) error {
	err := s.w.do(ctx, &op{shared: leaderShared, run: func(x *wtx) error {
		_, err := x.exec(`INSERT INTO leader_marks (name, received_ms) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET received_ms = CASE WHEN excluded.received_ms > leader_marks.received_ms
			THEN excluded.received_ms ELSE leader_marks.received_ms END`, name, ms(at))
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: set leader mark %s: %w", name, err)
	}
	return nil
}

// MaxReplay bounds what TransitionsReceivedSince returns with limit 0: a
// takeover after a leaderless hour of a flapping fleet reads at most this
// many transitions (about 250 MB at worst); the store logs an error when
// it cuts a read there.
const MaxReplay = 1_000_000

// replayPage is how many rows one query of TransitionsReceivedSince reads.
const replayPage = 10_000

// TransitionsReceivedSince returns the stored transitions the collector
// received at or after since, oldest first (by the agent's At, then by
// ID): at most limit, or with limit 0 (or above MaxReplay) every one up to
// MaxReplay. It reads them in pages of 10,000 (keyset on at and id), so a
// long backlog is never cut at one query's size. Errors: ctx's or a
// wrapped driver error.
func (s *Store) TransitionsReceivedSince(ctx context.Context, since time.Time, limit int) ([]cbdash.TransitionRecord, error) {
	if limit <= 0 || limit > MaxReplay {
		limit = MaxReplay
	}
	out := []cbdash.TransitionRecord{}
	afterAt, afterID := int64(math.MinInt64), int64(math.MinInt64)
	for len(out) < limit {
		n := min(replayPage, limit-len(out))
		page, err := s.transitionsReceivedPage(ctx, ms(since), afterAt, afterID, n)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < n {
			break
		}
		last := page[len(page)-1]
		afterAt, afterID = last.At, last.ID
	}
	if len(out) == MaxReplay {
		s.opts.Logger.Error("store: a takeover's replay read the most transitions it may; the ones received later are not replayed",
			"read", len(out), "received_since", since)
	}
	return out, nil
}

// transitionsReceivedPage is one page of TransitionsReceivedSince: the
// rows received at or after since that come after (afterAt, afterID).
func (s *Store) transitionsReceivedPage(ctx context.Context, since, afterAt, afterID int64, limit int) ([]cbdash.TransitionRecord, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, service, instance, breaker, from_state, to_state, at, generation, cause, open_ms, received_at
		FROM transitions WHERE received_at >= $1 AND (at > $2 OR (at = $3 AND id > $4)) ORDER BY at, id LIMIT $5`,
		since, afterAt, afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: transitions received: %w", err)
	}
	return scanTransitions(rows, nil)
}

// ClaimFiringAlert records that alert a (rule and subject) starts firing
// with a.Since as its episode start, unless the alert is already firing
// (its kept state is returned, claimed false: another leader, or this one
// before a restart, fired it) or a.Since falls within an episode of it
// that already resolved (the zero FiringAlert is returned, claimed false:
// a replay of a trip already alerted). When claimed, the kept state is a,
// as PutFiringAlert leaves it. Errors: ctx's or a wrapped driver error.
func (s *Store) ClaimFiringAlert(ctx context.Context, a cbdash.FiringAlert) (cbdash.FiringAlert, bool, error) {
	since := a.Since.UnixMilli()
	// The op's own variables: after ctx ends the writer may still run it.
	var existing cbdash.FiringAlert
	var claimed bool
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		existing, claimed = cbdash.FiringAlert{}, false
		row, err := x.queryRow(`SELECT count(*) FROM alert_episodes WHERE rule_id = $1 AND subject = $2 AND since_ms <= $3 AND resolved_ms >= $4`,
			a.RuleID, a.Subject, since, since)
		if err != nil {
			return err
		}
		var n int64
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		// A kept state that is not firing (its resolve is still being
		// delivered) gives way; a firing one is the alert already.
		res, err := x.exec(`INSERT INTO alert_firing (rule_id, subject, firing, since_ms, detail, pending) VALUES ($1, $2, 1, $3, $4, $5)
			ON CONFLICT (rule_id, subject) DO UPDATE SET firing = 1, since_ms = excluded.since_ms,
			detail = excluded.detail, pending = excluded.pending, flapping_ms = 0, flapping_pending = 0, flapping_now = '',
			acked_by = '', acked_ms = 0
			WHERE alert_firing.firing = 0`,
			a.RuleID, a.Subject, since, a.Detail, a.Pending)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k > 0 {
			claimed = true
			return nil
		}
		row, err = x.queryRow(`SELECT since_ms, detail, pending FROM alert_firing WHERE rule_id = $1 AND subject = $2`, a.RuleID, a.Subject)
		if err != nil {
			return err
		}
		var got int64
		existing = cbdash.FiringAlert{RuleID: a.RuleID, Subject: a.Subject, Firing: true}
		if err := row.Scan(&got, &existing.Detail, &existing.Pending); err != nil {
			return err
		}
		existing.Since = fromMs(got)
		return nil
	}})
	if err != nil {
		return cbdash.FiringAlert{}, false, fmt.Errorf("store: claim firing alert: %w", err)
	}
	return existing, claimed, nil
}

// ResolveFiringAlert records that the alert of a.RuleID and a.Subject
// firing since a.Since resolved, its condition last seen true at (the
// caller's end of the episode, not the time of the resolve: a trip after
// it that the caller had not seen is a new episode): its kept state
// becomes a (not firing, pending the resolve) and the episode
// [a.Since, at] is kept, so that a replayed trip within it fires nothing. claimed is false when the alert
// is not firing with that start any more (another leader resolved it).
// prevPending is the event the alert was pending before (cbdash.AlertFiring
// when its firing has not been delivered yet, "" when it has). Errors:
// ctx's or a wrapped driver error.
func (s *Store) ResolveFiringAlert(ctx context.Context, a cbdash.FiringAlert, at time.Time) (string, bool, error) {
	since := a.Since.UnixMilli()
	// The op's own variables: after ctx ends the writer may still run it.
	var prevPending string
	var claimed bool
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		claimed, prevPending = false, ""
		row, err := x.queryRow(`SELECT pending FROM alert_firing WHERE rule_id = $1 AND subject = $2 AND since_ms = $3 AND firing = 1`,
			a.RuleID, a.Subject, since)
		if err != nil {
			return err
		}
		if err := row.Scan(&prevPending); errors.Is(err, sql.ErrNoRows) {
			return nil
		} else if err != nil {
			return err
		}
		res, err := x.exec(`UPDATE alert_firing SET firing = 0, detail = $1, pending = $2 WHERE rule_id = $3 AND subject = $4 AND since_ms = $5 AND firing = 1`,
			a.Detail, a.Pending, a.RuleID, a.Subject, since)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil || k == 0 {
			return err
		}
		claimed = true
		_, err = x.exec(`INSERT INTO alert_episodes (rule_id, subject, since_ms, resolved_ms) VALUES ($1, $2, $3, $4)
			ON CONFLICT (rule_id, subject, since_ms) DO UPDATE SET resolved_ms = excluded.resolved_ms`,
			a.RuleID, a.Subject, since, max(at.UnixMilli(), since))
		return err
	}})
	if err != nil {
		return "", false, fmt.Errorf("store: resolve firing alert: %w", err)
	}
	if !claimed {
		prevPending = ""
	}
	return prevPending, claimed, nil
}
