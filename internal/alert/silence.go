package alert

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// SilenceStore keeps silences and acknowledgements. *store.Store
// implements it.
type SilenceStore interface {
	// ClaimFlapping: see store.Store.ClaimFlapping.
	ClaimFlapping(ctx context.Context, ruleID int64, subject string, since time.Time, summary string) (bool, error)
	AckAlert(ctx context.Context, ruleID int64, subject, by string, at time.Time) error
	CreateSilence(ctx context.Context, sl cbdash.Silence) (cbdash.Silence, error)
	ExpireSilence(ctx context.Context, id int64, by string, at time.Time) error
	// Silences returns those ending after since (all when zero), newest first.
	Silences(ctx context.Context, since time.Time, limit int) ([]cbdash.Silence, error)
	Silence(ctx context.Context, id int64) (cbdash.Silence, error)
}

// ack is an acknowledgement of the alert firing since since.
type ack struct {
	since time.Time
	by    string
	at    time.Time
}

// CreateSilence stores a silence made by actor (its CreatedBy): from then
// until its EndsAt the notifications of the alerts it matches are not
// sent (see Service.Run). Errors wrap cbdash.ErrInvalid naming the field
// (no matcher, no reason, an end not after the start).
func (s *Service) CreateSilence(ctx context.Context, sl cbdash.Silence, actor string) (cbdash.Silence, error) {
	sl.CreatedBy, sl.CreatedAt = actor, s.cfg.Clock.Now()
	return s.cfg.Store.CreateSilence(ctx, sl)
}

// ExpireSilence ends silence id now, recording actor. An unknown ID is an
// error wrapping cbdash.ErrNotFound.
func (s *Service) ExpireSilence(ctx context.Context, id int64, actor string) error {
	return s.cfg.Store.ExpireSilence(ctx, id, actor, s.cfg.Clock.Now())
}

// Silences returns the silences active now or later (all, ended ones
// too, when all), newest first.
func (s *Service) Silences(ctx context.Context, all bool) ([]cbdash.Silence, error) {
	since := s.cfg.Clock.Now()
	if all {
		since = time.Time{}
	}
	return s.cfg.Store.Silences(ctx, since, 0)
}

// Ack acknowledges the alert of rule and subject firing now, as actor: it
// is shown acknowledged (Alerts), and sends no flapping message; its
// resolve is still sent. An alert not firing is an error wrapping
// cbdash.ErrNotFound.
func (s *Service) Ack(ctx context.Context, ruleID int64, subject, actor string) error {
	now := s.cfg.Clock.Now()
	if err := s.cfg.Store.AckAlert(ctx, ruleID, subject, actor, now); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.engine.Alerts() {
		if a.RuleID == ruleID && a.Subject == subject {
			s.acks[alertKey{ruleID, subject}] = ack{since: a.Since, by: actor, at: now}
		}
	}
	return nil
}

// refreshAcks reads the acknowledgements from the store: one made
// through another collector's API shows here within markEvery, and
// those of alerts gone from the store are forgotten (bounded memory).
func (s *Service) refreshAcks(ctx context.Context) {
	kept, err := s.cfg.Store.FiringAlerts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: read acknowledgements", "err", err)
		}
		return
	}
	acks := make(map[alertKey]ack)
	for _, a := range kept {
		if !a.AckedAt.IsZero() {
			acks[alertKey{a.RuleID, a.Subject}] = ack{since: a.Since, by: a.AckedBy, at: a.AckedAt}
		}
	}
	s.mu.Lock()
	s.acks = acks // those of resolved alerts are gone with their rows
	s.mu.Unlock()
}

// withAcks fills the acknowledgement of each alert of as that has one
// for its episode. Callers hold s.mu.
func (s *Service) withAcks(as []cbdash.FiringAlert) []cbdash.FiringAlert {
	for i, a := range as {
		if k, ok := s.acks[alertKey{a.RuleID, a.Subject}]; ok && k.since.Equal(a.Since) {
			as[i].AckedBy, as[i].AckedAt = k.by, k.at
		}
		if d, ok := s.engine.depOf(a.Subject); ok {
			as[i].Labels = d.Labels
		}
	}
	return as
}

// silencedBy returns the silence active now that matches n's subject (with
// its dependency's labels), if any. A store that fails silences nothing:
// a notification too many beats one lost.
func (s *Service) silencedBy(ctx context.Context, subject string) (cbdash.Silence, bool) {
	now := s.cfg.Clock.Now()
	sls, err := s.cfg.Store.Silences(ctx, now, 0)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: read silences; notifying", "err", err)
		}
		return cbdash.Silence{}, false
	}
	s.mu.Lock()
	d, _ := s.engine.depOf(subject)
	s.mu.Unlock()
	return SilenceOf(subject, d.Labels, sls, now)
}

// mute handles n when a silence holds it back: instead of the webhook
// call, the delivery log records it (not OK, 0 attempts, the silence
// named). A firing muted is remembered: sent when the silence ends if the
// alert still fires (unmute); its resolve is then muted too.
func (s *Service) mute(ctx context.Context, n Notification, sl cbdash.Silence) {
	k := alertKey{n.Rule.ID, n.Subject}
	s.qmu.Lock()
	switch n.Event {
	case cbdash.AlertFiring:
		s.muted[k] = n.Since
	case cbdash.AlertResolved:
		delete(s.muted, k)
	}
	s.qmu.Unlock()
	s.logMuted(ctx, n, fmt.Sprintf("silenced by silence %d until %s (%s)", sl.ID, sl.EndsAt.UTC().Format(time.RFC3339), sl.Reason))
}

// logMuted records n in the delivery log as not sent, for why.
func (s *Service) logMuted(ctx context.Context, n Notification, why string) {
	body, _ := Body(n, s.cfg.ExternalURL)
	entry := cbdash.AlertDelivery{RuleID: n.Rule.ID, Subject: n.Subject, Event: n.Event, URL: n.Rule.WebhookURL,
		Error: why, Body: string(body), At: s.cfg.Clock.Now().UTC()}
	if _, err := s.cfg.Store.SaveAlertDelivery(ctx, entry); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Error("alert: log a silenced notification", "err", err)
	}
}

// mutedResolve reports whether n is the resolve of a firing that was
// muted and never sent (then n is not sent either), forgetting it.
func (s *Service) mutedResolve(n Notification) bool {
	if n.Event != cbdash.AlertResolved {
		return false
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	k := alertKey{n.Rule.ID, n.Subject}
	since, ok := s.muted[k]
	delete(s.muted, k)
	return ok && since.Equal(n.Since)
}

// unmute sends the firings muted by silences that have ended since, for
// the alerts still firing with the same start (Run calls it every
// Interval): a silence ends on time.
func (s *Service) unmute(ctx context.Context, enqueue func(Notification)) {
	s.qmu.Lock()
	muted := make(map[alertKey]time.Time, len(s.muted))
	for k, v := range s.muted {
		muted[k] = v
	}
	s.qmu.Unlock()
	for k, since := range muted {
		n, firing := s.firingNow(k, since)
		if !firing {
			continue
		}
		if _, still := s.silencedBy(ctx, k.subject); still {
			continue
		}
		s.qmu.Lock()
		delete(s.muted, k)
		s.qmu.Unlock()
		enqueue(n)
	}
}

// firingNow returns the firing notification of alert k if it still
// fires since since.
func (s *Service) firingNow(k alertKey, since time.Time) (Notification, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.engine.alerts[k]
	r, ok := s.engine.Rule(k.rule)
	if st == nil || !st.firing || !st.since.Equal(since) || !ok {
		return Notification{}, false
	}
	return Notification{Rule: r, Subject: k.subject, Event: cbdash.AlertFiring, At: s.cfg.Clock.Now(), Since: since, Detail: st.detail}, true
}

// IncidentLink is the page of incident id on the dashboard at external;
// "" when external is "" or id is 0.
func IncidentLink(external string, id int64) string {
	if external == "" || id == 0 {
		return ""
	}
	return strings.TrimRight(external, "/") + "/incidents/" + strconv.FormatInt(id, 10)
}

// Link is the page of subject on the dashboard at external (the serve
// flag --external-url): the dependency page of "service/breaker", the
// alerts page of "service@instance" and of a group ("*/payments",
// "checkout/*"); "" when external is "".
func Link(external, subject string) string {
	if external == "" {
		return ""
	}
	base := strings.TrimRight(external, "/")
	if svc, br, ok := strings.Cut(subject, "/"); ok && svc != "*" && br != "*" {
		return base + "/dependency?" + url.Values{"service": {svc}, "breaker": {br}}.Encode()
	}
	return base + "/alerts"
}
