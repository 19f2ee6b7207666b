package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Alert rules and the webhook delivery log (internal/alert). Durations
// are stored in ms, times in Unix ms.

// validateAlertRule checks what the store relies on; it returns an error
// wrapping cbdash.ErrInvalid naming the bad field.
func validateAlertRule(r cbdash.AlertRule) error {
	if err := validateRuleNames(r); err != nil {
		return fmt.Errorf("store: alert rule: %s: %w", err, cbdash.ErrInvalid)
	}
	if strings.TrimSpace(r.Service) == "" {
		return fmt.Errorf("store: alert rule: service is required: %w", cbdash.ErrInvalid)
	}
	u, err := url.Parse(r.WebhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not the URL itself: any part of it may be a secret (internal/alert.MaskURL).
		return fmt.Errorf("store: alert rule: webhook_url is not an http(s) URL with a host: %w", cbdash.ErrInvalid)
	}
	if r.For < 0 || r.Hold < 0 || r.Margin < 0 || r.Margin > 100 || r.FlapCount < 0 || r.FlapWindow < 0 || r.GroupWait < 0 || r.GroupInterval < 0 {
		return fmt.Errorf("store: alert rule: for, hold, margin, flap_count, flap_window, group_wait and group_interval must not be negative (margin at most 100): %w",
			cbdash.ErrInvalid)
	}
	return nil
}

// validateRuleNames checks the rule's kind, format and group_by against
// the names the engine knows.
func validateRuleNames(r cbdash.AlertRule) error {
	switch r.Kind {
	case cbdash.AlertOpen, cbdash.AlertHalfOpenLong, cbdash.AlertHeadroom, cbdash.AlertStale, cbdash.AlertDrillStopped,
		cbdash.AlertFallbackUnexercised:
	default:
		return fmt.Errorf("kind %q is not one of open, half_open_long, headroom, stale, drill_stopped, fallback_unexercised", r.Kind)
	}
	switch r.Format {
	case "", cbdash.FormatJSON, cbdash.FormatSlack, cbdash.FormatPagerDuty:
	default:
		return fmt.Errorf("format %q is not json, slack or pagerduty", r.Format)
	}
	switch r.GroupBy {
	case "", cbdash.GroupBreaker, cbdash.GroupService:
	default:
		return fmt.Errorf("group_by %q is not breaker, service or empty", r.GroupBy)
	}
	return nil
}

func ruleArgs(r cbdash.AlertRule) []any {
	format := r.Format
	if format == "" {
		format = cbdash.FormatJSON
	}
	return []any{r.Name, r.Service, r.Breaker, r.Kind, r.For.Milliseconds(), r.Margin, r.Hold.Milliseconds(), r.WebhookURL, format, r.Disabled,
		r.FlapCount, r.FlapWindow.Milliseconds(), r.GroupBy, r.GroupWait.Milliseconds(), r.GroupInterval.Milliseconds()}
}

// CreateAlertRule validates and stores a rule (its ID is ignored) and
// returns it as stored. A bad rule is an error wrapping cbdash.ErrInvalid.
func (s *Store) CreateAlertRule(ctx context.Context, r cbdash.AlertRule) (cbdash.AlertRule, error) {
	if err := validateAlertRule(r); err != nil {
		return r, err
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.opts.Clock.Now()
	}
	r.CreatedAt = time.UnixMilli(r.CreatedAt.UnixMilli()).UTC()
	if r.Format == "" {
		r.Format = cbdash.FormatJSON
	}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		var err error
		r.ID, err = x.insertID(`INSERT INTO alert_rules (name, service, breaker, kind, for_ms, margin, hold_ms, webhook_url, format, disabled,
			flap_count, flap_window_ms, group_by, group_wait_ms, group_interval_ms, created_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`, append(ruleArgs(r), r.CreatedAt.UnixMilli())...)
		return err
	}})
	if err != nil {
		return r, fmt.Errorf("store: create alert rule: %w", err)
	}
	return r, nil
}

// UpdateAlertRule rewrites a rule. Errors wrap cbdash.ErrInvalid for a bad
// rule and cbdash.ErrNotFound for an unknown ID.
func (s *Store) UpdateAlertRule(ctx context.Context, r cbdash.AlertRule) error {
	if err := validateAlertRule(r); err != nil {
		return err
	}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`UPDATE alert_rules SET name = $1, service = $2, breaker = $3, kind = $4, for_ms = $5, margin = $6, hold_ms = $7,
			webhook_url = $8, format = $9, disabled = $10, flap_count = $11, flap_window_ms = $12,
			group_by = $13, group_wait_ms = $14, group_interval_ms = $15 WHERE id = $16`, append(ruleArgs(r), r.ID)...)
		if err != nil {
			return err
		}
		return mustAffect(res, "alert rule", r.ID)
	}})
	if err != nil {
		return fmt.Errorf("store: update alert rule: %w", err)
	}
	return nil
}

// DeleteAlertRule removes a rule and the state of its alerts; its
// deliveries stay in the log. An
// unknown ID is an error wrapping cbdash.ErrNotFound.
func (s *Store) DeleteAlertRule(ctx context.Context, id int64) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec(`DELETE FROM alert_rules WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if err := mustAffect(res, "alert rule", id); err != nil {
			return err
		}
		if _, err := x.exec(`DELETE FROM alert_firing WHERE rule_id = $1`, id); err != nil {
			return err
		}
		_, err = x.exec(`DELETE FROM alert_episodes WHERE rule_id = $1`, id)
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: delete alert rule: %w", err)
	}
	return nil
}

func mustAffect(res sql.Result, what string, id int64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s %d: %w", what, id, cbdash.ErrNotFound)
	}
	return nil
}

const ruleColumns = `id, name, service, breaker, kind, for_ms, margin, hold_ms, webhook_url, format, disabled, created_ms, flap_count, flap_window_ms,
	group_by, group_wait_ms, group_interval_ms`

func scanRule(sc interface{ Scan(...any) error }) (cbdash.AlertRule, error) {
	var r cbdash.AlertRule
	var forMs, holdMs, created, flapMs, waitMs, intervalMs int64
	if err := sc.Scan(&r.ID, &r.Name, &r.Service, &r.Breaker, &r.Kind, &forMs, &r.Margin, &holdMs, &r.WebhookURL, &r.Format, &r.Disabled, &created,
		&r.FlapCount, &flapMs, &r.GroupBy, &waitMs, &intervalMs); err != nil {
		return r, err
	}
	r.For = time.Duration(forMs) * time.Millisecond
	r.Hold = time.Duration(holdMs) * time.Millisecond
	r.FlapWindow = time.Duration(flapMs) * time.Millisecond
	r.GroupWait = time.Duration(waitMs) * time.Millisecond
	r.GroupInterval = time.Duration(intervalMs) * time.Millisecond
	r.CreatedAt = time.UnixMilli(created).UTC()
	return r, nil
}

// AlertRule returns one rule; an unknown ID is an error wrapping
// cbdash.ErrNotFound.
func (s *Store) AlertRule(ctx context.Context, id int64) (cbdash.AlertRule, error) {
	r, err := scanRule(s.rdb.QueryRowContext(ctx, `SELECT `+ruleColumns+` FROM alert_rules WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("store: alert rule %d: %w", id, cbdash.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("store: alert rule %d: %w", id, err)
	}
	return r, nil
}

// AlertRules returns every rule, oldest first.
func (s *Store) AlertRules(ctx context.Context) ([]cbdash.AlertRule, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+ruleColumns+` FROM alert_rules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: alert rules: %w", err)
	}
	defer rows.Close()
	var out []cbdash.AlertRule
	for rows.Next() {
		r, err := scanRule(rows)
		if err != nil {
			return nil, fmt.Errorf("store: alert rules: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: alert rules: %w", err)
	}
	return out, nil
}

// SaveAlertDelivery appends a delivery log entry and returns its ID.
func (s *Store) SaveAlertDelivery(ctx context.Context, d cbdash.AlertDelivery) (int64, error) {
	var id int64
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		var err error
		id, err = x.insertID(`INSERT INTO alert_deliveries (rule_id, subject, event, url, status, attempts, ok, error, body, at_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			d.RuleID, d.Subject, d.Event, d.URL, d.Status, d.Attempts, d.OK, d.Error, d.Body, d.At.UnixMilli())
		return err
	}})
	if err != nil {
		return 0, fmt.Errorf("store: save alert delivery: %w", err)
	}
	return id, nil
}

// AlertDeliveries returns delivery log entries, newest first.
func (s *Store) AlertDeliveries(ctx context.Context, q cbdash.DeliveryQuery) ([]cbdash.AlertDelivery, error) {
	query := `SELECT id, rule_id, subject, event, url, status, attempts, ok, error, body, at_ms FROM alert_deliveries`
	var args params
	if q.RuleID != 0 {
		query += " WHERE rule_id = " + args.add(q.RuleID)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 200
	}
	query += " ORDER BY id DESC LIMIT " + args.add(limit)
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: alert deliveries: %w", err)
	}
	defer rows.Close()
	var out []cbdash.AlertDelivery
	for rows.Next() {
		var d cbdash.AlertDelivery
		var at int64
		if err := rows.Scan(&d.ID, &d.RuleID, &d.Subject, &d.Event, &d.URL, &d.Status, &d.Attempts, &d.OK, &d.Error, &d.Body, &at); err != nil {
			return nil, fmt.Errorf("store: alert deliveries: %w", err)
		}
		d.At = time.UnixMilli(at).UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: alert deliveries: %w", err)
	}
	return out, nil
}
