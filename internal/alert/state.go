package alert

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// StateStore keeps the state of alerts that fired, so that a restart
// neither repeats a firing nor loses a resolve. *store.Store implements
// it.
type StateStore interface {
	// ClaimFiringAlert records that a starts firing, unless it fires
	// already (the kept state is returned) or a.Since is within an
	// episode of it that resolved (claimed false, zero state).
	ClaimFiringAlert(ctx context.Context, a cbdash.FiringAlert) (existing cbdash.FiringAlert, claimed bool, err error)
	// ResolveFiringAlert records that the alert firing since a.Since
	// resolved at; claimed is false when it is not firing with that start.
	// prevPending is cbdash.AlertFiring when its firing was not delivered.
	ResolveFiringAlert(ctx context.Context, a cbdash.FiringAlert, at time.Time) (prevPending string, claimed bool, err error)
	// The handover: how far the transitions were processed, and the
	// ones received after.
	LeaderMark(ctx context.Context, name string) (time.Time, bool, error)
	SetLeaderMark(ctx context.Context, name string, at time.Time) error
	TransitionsReceivedSince(ctx context.Context, since time.Time, limit int) ([]cbdash.TransitionRecord, error)
	// AckFiringAlert records that the webhook call of event completed
	// (a firing: the pending event is cleared; a resolve: the state is
	// removed; a flapping message: it is no longer pending), unless the
	// alert's pending event is another one by now.
	AckFiringAlert(ctx context.Context, ruleID int64, subject, event string) error
	// DeleteFiringAlerts forgets every alert of a rule.
	DeleteFiringAlerts(ctx context.Context, ruleID int64) error
	// FiringAlerts returns every alert state kept.
	FiringAlerts(ctx context.Context) ([]cbdash.FiringAlert, error)
}

// restore gives the engine the alerts that were firing and returns the
// notifications whose webhook call had not completed when the last Run
// ended, to be queued again: a firing or a resolve, and the flapping
// message of an alert still firing. Kept states of rules that are gone or
// disabled are forgotten.
func (s *Service) restore(ctx context.Context) ([]Notification, error) {
	kept, err := s.cfg.Store.FiringAlerts(ctx)
	if err != nil {
		return nil, fmt.Errorf("alert: load firing alerts: %w", err)
	}
	s.mu.Lock()
	s.engine.Restore(kept, s.cfg.Clock.Now())
	clear(s.acks)
	var pending []Notification
	for _, a := range kept {
		if !a.AckedAt.IsZero() {
			s.acks[alertKey{a.RuleID, a.Subject}] = ack{since: a.Since, by: a.AckedBy, at: a.AckedAt}
		}
		r, ok := s.engine.Rule(a.RuleID)
		if !ok {
			continue
		}
		if a.Pending != "" {
			n := Notification{Rule: r, Subject: a.Subject, Event: a.Pending, At: s.cfg.Clock.Now(), Since: a.Since, Detail: a.Detail}
			if n.Event == cbdash.AlertResolved {
				n.Detail = "resolved: " + a.Detail
			}
			pending = append(pending, n)
		}
		if a.Firing && a.FlappingPending && a.AckedAt.IsZero() { // after its firing, as it was queued
			pending = append(pending, Notification{Rule: r, Subject: a.Subject, Event: cbdash.AlertFlapping, At: s.cfg.Clock.Now(),
				Since: a.Since, Detail: a.Detail, Now: a.FlappingNow})
		}
	}
	s.mu.Unlock()
	return pending, nil
}

// forgetInactive removes the kept state of alerts whose rule is disabled
// (a deleted rule's state goes with it in the store).
func (s *Service) forgetInactive(ctx context.Context, rules []cbdash.AlertRule) error {
	for _, r := range rules {
		if !r.Disabled {
			continue
		}
		if err := s.cfg.Store.DeleteFiringAlerts(ctx, r.ID); err != nil {
			return fmt.Errorf("alert: forget alerts of disabled rule %d: %w", r.ID, err)
		}
	}
	return nil
}

// persist records the state n leaves its alert in before n is queued: a
// crash between the two leaves the notification pending, to be sent by
// the next Run. It reports whether n is to be delivered: not when the
// store says another leader (or this one, before a restart or in a
// replay) fired or resolved that episode already; the engine then takes
// the stored state (Engine.Adopt, Engine.Forget). A store that fails
// does not stop the delivery.
//
// A resolve whose firing is recorded but was not delivered (a leader
// fired it and was gone before its webhook call completed) and that this
// Run has not queued is preceded by that firing: a resolve never comes
// without its alert. It is returned in before.
func (s *Service) persist(ctx context.Context, n Notification) (send bool, before *Notification) {
	if n.Event == cbdash.AlertFlapping {
		return s.persistFlapping(ctx, n), nil
	}
	a := cbdash.FiringAlert{RuleID: n.Rule.ID, Subject: n.Subject, Firing: n.Event == cbdash.AlertFiring,
		Since: n.Since, Detail: n.Detail, Pending: n.Event}
	var claimed bool
	var err error
	if a.Firing {
		var existing cbdash.FiringAlert
		existing, claimed, err = s.cfg.Store.ClaimFiringAlert(ctx, a)
		if err == nil && !claimed {
			s.mu.Lock()
			if existing.Firing {
				s.engine.Adopt(n.Rule.ID, n.Subject, existing.Since)
			} else {
				s.engine.Forget(n.Rule.ID, n.Subject)
			}
			s.mu.Unlock()
		}
	} else {
		var prev string
		// The episode ends when the condition was last seen true, not at
		// the resolve: a trip between the two was not seen by this leader.
		end := n.At
		if !n.lastTrue.IsZero() && n.lastTrue.Before(end) {
			end = n.lastTrue
		}
		prev, claimed, err = s.cfg.Store.ResolveFiringAlert(ctx, a, end)
		if err == nil && claimed && prev == cbdash.AlertFiring && !s.queuedFiring(n) {
			f := n
			f.Event, f.At, f.Detail = cbdash.AlertFiring, n.Since, strings.TrimPrefix(n.Detail, "resolved: ")
			before = &f
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: keep alert state", "rule", n.Rule.ID, "subject", n.Subject, "err", err)
		}
		return true, nil
	}
	if !claimed {
		s.cfg.Logger.Debug("alert: already recorded; not sent again", "rule", n.Rule.ID, "subject", n.Subject, "event", n.Event, "since", n.Since)
	}
	return claimed, before
}

// persistFlapping records that n, a flapping message, is to be sent;
// false when another leader (or this one before) sent it for this
// episode already, or the alert is acknowledged. A store that fails does
// not stop the delivery.
func (s *Service) persistFlapping(ctx context.Context, n Notification) bool {
	s.mu.Lock()
	st := s.engine.alerts[alertKey{n.Rule.ID, n.Subject}]
	var since time.Time
	if st != nil {
		since = st.flapSince
	}
	s.mu.Unlock()
	claimed, err := s.cfg.Store.ClaimFlapping(ctx, n.Rule.ID, n.Subject, since, n.Now)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: keep flapping state", "rule", n.Rule.ID, "subject", n.Subject, "err", err)
		}
		return true
	}
	return claimed
}

// queuedFiring reports whether this Run queued the firing of n's alert
// with n's start, and forgets it when n is its resolve.
func (s *Service) queuedFiring(n Notification) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	k := alertKey{n.Rule.ID, n.Subject}
	since, ok := s.fired[k]
	if n.Event == cbdash.AlertResolved {
		delete(s.fired, k)
	}
	return ok && since.Equal(n.Since)
}

// ack records that n's webhook call completed (delivered or given up).
func (s *Service) ack(ctx context.Context, n Notification) {
	if n.Event != cbdash.AlertFiring && n.Event != cbdash.AlertResolved && n.Event != cbdash.AlertFlapping {
		return // a test notification has no pending state
	}
	if err := s.cfg.Store.AckFiringAlert(ctx, n.Rule.ID, n.Subject, n.Event); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Error("alert: acknowledge delivery", "rule", n.Rule.ID, "subject", n.Subject, "err", err)
	}
}

// Alerts returns the alerts firing now, longest firing first.
func (s *Service) Alerts() []cbdash.FiringAlert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.withAcks(s.engine.Alerts())
}

// Rules returns every rule, oldest first.
func (s *Service) Rules(ctx context.Context) ([]cbdash.AlertRule, error) {
	return s.cfg.Store.AlertRules(ctx)
}

// Rule returns one rule; an unknown ID is an error wrapping
// cbdash.ErrNotFound.
func (s *Service) Rule(ctx context.Context, id int64) (cbdash.AlertRule, error) {
	return s.cfg.Store.AlertRule(ctx, id)
}

// CreateRule stores a new rule and starts evaluating it. A bad rule is an
// error wrapping cbdash.ErrInvalid naming the field; so is a webhook in a
// loopback, private or link-local range unless the delivery config allows
// them (CheckDestination). Every way in (API, page, CLI) goes through here.
func (s *Service) CreateRule(ctx context.Context, r cbdash.AlertRule) (cbdash.AlertRule, error) {
	if err := checkNotMasked(r.WebhookURL); err != nil {
		return r, err
	}
	if err := CheckDestination(ctx, r.WebhookURL, s.cfg.Delivery.AllowPrivate); err != nil {
		return r, err
	}
	r, err := s.cfg.Store.CreateAlertRule(ctx, r)
	if err != nil {
		return r, err
	}
	return r, s.Reload(ctx)
}

// UpdateRule rewrites a rule (its creation time is kept) and evaluates it
// from now on. Errors wrap cbdash.ErrInvalid (as CreateRule) or
// cbdash.ErrNotFound. A webhook URL sent back as MaskURL showed it (or
// as it was shown before issue 27) keeps the stored one; any other URL
// holding "…" is refused (ErrInvalid), so a masked URL never replaces a
// webhook.
func (s *Service) UpdateRule(ctx context.Context, r cbdash.AlertRule) error {
	old, err := s.cfg.Store.AlertRule(ctx, r.ID)
	if err != nil {
		return err
	}
	if isMasked(r.WebhookURL, old.WebhookURL) {
		r.WebhookURL = old.WebhookURL
	} else if err := checkNotMasked(r.WebhookURL); err != nil {
		return err
	} else if err := CheckDestination(ctx, r.WebhookURL, s.cfg.Delivery.AllowPrivate); err != nil {
		return err
	}
	r.CreatedAt = old.CreatedAt
	if err := s.cfg.Store.UpdateAlertRule(ctx, r); err != nil {
		return err
	}
	return s.Reload(ctx)
}

// DeleteRule removes a rule and forgets its alerts without a resolve. An
// unknown ID is an error wrapping cbdash.ErrNotFound.
func (s *Service) DeleteRule(ctx context.Context, id int64) error {
	if err := s.cfg.Store.DeleteAlertRule(ctx, id); err != nil {
		return err
	}
	return s.Reload(ctx)
}

// Deliveries returns delivery log entries, newest first.
func (s *Service) Deliveries(ctx context.Context, q cbdash.DeliveryQuery) ([]cbdash.AlertDelivery, error) {
	return s.cfg.Store.AlertDeliveries(ctx, q)
}

// Test sends one test notification (event cbdash.AlertTest) for rule id to
// its webhook, once, without retries, and returns the delivery log entry
// (OK false with Error when the webhook failed). An unknown ID is an error
// wrapping cbdash.ErrNotFound.
func (s *Service) Test(ctx context.Context, id int64) (cbdash.AlertDelivery, error) {
	r, err := s.cfg.Store.AlertRule(ctx, id)
	if err != nil {
		return cbdash.AlertDelivery{}, err
	}
	now := s.cfg.Clock.Now()
	subject := r.Service
	if r.Breaker != "" {
		subject += "/" + r.Breaker
	}
	return s.tester.Deliver(ctx, Notification{Rule: r, Subject: subject, Event: cbdash.AlertTest, At: now, Since: now,
		Detail: "test notification from cbdash for " + subject + "; nothing is firing"})
}
