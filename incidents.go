package cbdash

import (
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Incident is a period during which a dependency's breaker was not closed
// on some of its instances: it starts when the breaker opens (on any
// instance, or on a configured share of them) and ends when every instance
// is closed again and stays closed for a quiet period. Openings within the
// quiet period belong to the same incident. See internal/incident.
type Incident struct {
	ID int64 `json:"id"`
	DependencyKey
	// Start is when the first instance opened (agent clock).
	Start time.Time `json:"start"`
	// End is when the last instance closed again; zero while the incident
	// is open (including its quiet period).
	End time.Time `json:"end,omitzero"`
	// Open is true until the quiet period after the last close has passed.
	Open bool `json:"open"`
	// Instances are the instances that were not closed at some point of the
	// incident, sorted.
	Instances []string `json:"instances"`
	// Opens counts transitions to open over all instances.
	Opens int `json:"opens"`
	// FirstInstance and FirstCause describe the first trip.
	FirstInstance string         `json:"first_instance"`
	FirstCause    protocol.Cause `json:"first_cause"`
	// Notes are operator notes, oldest first (filled by Incident reads, not
	// by lists).
	Notes []IncidentNote `json:"notes,omitempty"`
}

// Duration is End-Start, or now-Start while the incident is open.
func (i Incident) Duration(now time.Time) time.Duration {
	if i.End.IsZero() {
		return now.Sub(i.Start)
	}
	return i.End.Sub(i.Start)
}

// IncidentNote is an operator's note on an incident.
type IncidentNote struct {
	ID         int64     `json:"id"`
	IncidentID int64     `json:"incident_id"`
	At         time.Time `json:"at"`
	Author     string    `json:"author"`
	Text       string    `json:"text"`
}

// IncidentQuery selects incidents, newest first. Empty fields match all.
type IncidentQuery struct {
	Service, Breaker string
	// From and To select incidents that overlap [From, To); zero = unbounded.
	From, To time.Time
	OpenOnly bool
	Limit    int // 0 = 200
}

// Alert rule kinds: what condition a rule watches.
const (
	// AlertOpen fires while a breaker is open or half-open on any live
	// instance (forced states are operator actions and do not fire).
	AlertOpen = "open"
	// AlertHalfOpenLong fires when an instance stays half-open longer than
	// the rule's For.
	AlertHalfOpenLong = "half_open_long"
	// AlertHeadroom fires when a closed breaker's failure rate or slow-call
	// rate is within the rule's Margin (percentage points) of its threshold,
	// with at least the minimum calls in the window: heading for open.
	AlertHeadroom = "headroom"
	// AlertStale fires when an instance of the service stops reporting.
	AlertStale = "stale"
	// AlertDrillStopped fires when a stop condition ended a drill (a
	// hold) covering the dependency; it resolves once the rule's hold has
	// passed after the stop.
	AlertDrillStopped = "drill_stopped"
	// AlertFallbackUnexercised fires for a breaker whose fallbacks have
	// not served rejected calls (under an open or forced-open breaker)
	// for the rule's For (0 = 30 days), or never, once the breaker has
	// been known that long (issue 32: a fallback that never runs rots).
	// It resolves once the rule's hold has passed after a drill or a real
	// open exercised the fallback. The last run survives a restart: it is
	// read from the stored windows (FallbackFreshness).
	AlertFallbackUnexercised = "fallback_unexercised"
)

// Webhook body formats of an alert rule.
const (
	FormatJSON  = "json"  // generic JSON body (internal/alert.Message)
	FormatSlack = "slack" // Slack incoming webhook: {"text": "...", "blocks": [...]}
	// FormatPagerDuty is a PagerDuty Events API v2 event (trigger or
	// resolve, dedup_key the rule and subject); the rule's webhook URL is
	// the events endpoint with the routing key in its query
	// (?routing_key=...), see internal/alert.Body.
	FormatPagerDuty = "pagerduty"
)

// Groupings of an alert rule's notifications (AlertRule.GroupBy).
const (
	GroupBreaker = "breaker"
	GroupService = "service"
)

// AlertRule says which condition to watch, where, and which webhook to
// tell.
type AlertRule struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// Service is required: one service, or "*" for every service (one
	// dependency down across many services, grouped with GroupBy);
	// Breaker "" means every breaker of the service(s).
	Service string `json:"service"`
	Breaker string `json:"breaker,omitempty"`
	Kind    string `json:"kind"` // one of the Alert* kinds
	// For is, for half_open_long, how long half-open may last (0 = 30s);
	// for fallback_unexercised, how long a fallback may go without
	// serving rejected calls (0 = 720h, 30 days).
	For time.Duration `json:"for,omitempty"`
	// Margin is, for headroom, the distance to the threshold in percentage
	// points at or under which the rule fires (0 = 10).
	Margin float64 `json:"margin,omitempty"`
	// Hold is how long the condition must stay false before a firing alert
	// resolves: flapping within Hold sends nothing more (0 = 2m).
	Hold time.Duration `json:"hold,omitempty"`
	// FlapCount and FlapWindow, for open rules: a breaker that opens
	// more than FlapCount times (0 = 5) within FlapWindow (0 = 10m) is
	// flapping: one AlertFlapping notification, then nothing until it
	// settles (no open for FlapWindow/FlapCount, at least Hold) and one
	// resolve says so.
	FlapCount  int           `json:"flap_count,omitempty"`
	FlapWindow time.Duration `json:"flap_window,omitempty"`
	// GroupBy batches the rule's notifications into one per group, after
	// Alertmanager's group_by: GroupBreaker (one per breaker name, across
	// services: "payments down on 20 services"), GroupService (one per
	// service), "" (one per subject, no batching). A group's first
	// firing waits GroupWait (0 = 10s) for others to join; firings that
	// join a group that notified wait GroupInterval (0 = 1m) after its
	// last message; one resolve is sent when every alert of the group has
	// resolved.
	GroupBy       string        `json:"group_by,omitempty"`
	GroupWait     time.Duration `json:"group_wait,omitempty"`
	GroupInterval time.Duration `json:"group_interval,omitempty"`
	WebhookURL    string        `json:"webhook_url"`
	Format        string        `json:"format"` // FormatJSON (default), FormatSlack or FormatPagerDuty
	Disabled      bool          `json:"disabled,omitempty"`
	CreatedAt     time.Time     `json:"created_at"`
}

// Alert delivery events.
const (
	AlertFiring   = "firing"
	AlertResolved = "resolved"
	// AlertTest is the event of a test notification an operator sends
	// from the rule editor: nothing is firing.
	AlertTest = "test"
	// AlertFlapping is sent once when a firing open alert's breaker
	// flaps (AlertRule.FlapCount); its resolve follows when it settles.
	AlertFlapping = "flapping"
)

// FiringAlert is the state of one alert (one rule and one subject) that
// fired and has not yet been resolved and delivered as resolved. It is
// kept in the store so that a restart neither repeats nor loses a
// notification.
type FiringAlert struct {
	RuleID  int64  `json:"rule_id"`
	Subject string `json:"subject"` // "service/breaker" or "service@instance"
	// Firing is false once the alert resolved while its resolve has not
	// been delivered yet (Pending is AlertResolved).
	Firing bool      `json:"firing"`
	Since  time.Time `json:"since"`  // when it started firing
	Detail string    `json:"detail"` // what was last seen, one line
	// Pending is the event (AlertFiring or AlertResolved) whose webhook
	// call has not completed yet; "" when none is pending.
	Pending string `json:"pending,omitempty"`
	// FlappingSince is when the first open of the flapping it was told
	// about happened (zero: not flapping).
	FlappingSince time.Time `json:"flapping_since,omitzero"`
	// AckedBy and AckedAt say who acknowledged it and when (zero: not
	// acknowledged). An acknowledged alert sends no flapping message;
	// its resolve is still sent.
	AckedBy string    `json:"acked_by,omitempty"`
	AckedAt time.Time `json:"acked_at,omitzero"`
	// Labels are the labels of the subject's dependency as the alert
	// service knows them (nil for an instance subject or when unknown):
	// what silences with label matchers match. Not in the JSON.
	Labels map[string]string `json:"-"`
	// FlappingPending is true while its flapping message, claimed, has
	// not been delivered (nor given up); FlappingNow is that message's
	// summary. Kept for the alert service (the next leader sends it
	// again); not part of the API.
	FlappingPending bool   `json:"-"`
	FlappingNow     string `json:"-"`
}

// AlertDelivery is one entry of the delivery log: one message to one
// webhook, after all its attempts.
type AlertDelivery struct {
	ID       int64     `json:"id"`
	RuleID   int64     `json:"rule_id"`
	Subject  string    `json:"subject"` // "service/breaker" or "service@instance"
	Event    string    `json:"event"`   // AlertFiring or AlertResolved
	URL      string    `json:"url"`
	Status   int       `json:"status"` // last HTTP status, 0 when none was received
	Attempts int       `json:"attempts"`
	OK       bool      `json:"ok"`
	Error    string    `json:"error,omitempty"`
	Body     string    `json:"body"`
	At       time.Time `json:"at"` // when the last attempt ended
}

// DeliveryQuery selects delivery log entries, newest first.
type DeliveryQuery struct {
	RuleID int64 // 0 = all
	Limit  int   // 0 = 200
}

// ConfigChange is a breaker configuration that an instance's hello changed,
// as seen live by internal/incident (the first configuration an instance
// declares is not a change).
type ConfigChange struct {
	ID int64 `json:"id"`
	DependencyKey
	Instance string                 `json:"instance"`
	At       time.Time              `json:"at"`
	Previous protocol.BreakerConfig `json:"previous"`
	Config   protocol.BreakerConfig `json:"config"`
}

// SilenceMatchers says which alerts a silence quiets: those whose
// subject's service is Service and breaker is Breaker and whose
// dependency carries every label of Labels; an empty field matches any.
// A stale alert's subject ("service@instance") has no breaker: a silence
// naming a breaker does not match it.
type SilenceMatchers struct {
	Service string            `json:"service,omitempty"`
	Breaker string            `json:"breaker,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Empty reports whether m matches every alert (refused when a silence is
// created).
func (m SilenceMatchers) Empty() bool {
	return m.Service == "" && m.Breaker == "" && len(m.Labels) == 0
}

// Match reports whether m matches an alert of subject ("service/breaker"
// or "service@instance") whose dependency has labels.
func (m SilenceMatchers) Match(subject string, labels map[string]string) bool {
	svc, br := subject, ""
	if s, b, ok := strings.Cut(subject, "/"); ok {
		svc, br = s, b
	} else if s, _, ok := strings.Cut(subject, "@"); ok {
		svc = s
	}
	if (m.Service != "" && m.Service != svc) || (m.Breaker != "" && m.Breaker != br) {
		return false
	}
	for k, v := range m.Labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Silence quiets the notifications of the alerts its matchers match
// from StartsAt until EndsAt (or until it is expired early). Alerts keep
// firing, on the page and in the API; only their webhooks are not
// called. Silences are kept after they end: who created each, why, and
// who expired it is the audit trail.
type Silence struct {
	ID        int64           `json:"id"`
	Matchers  SilenceMatchers `json:"matchers"`
	Reason    string          `json:"reason"`
	CreatedBy string          `json:"created_by"`
	CreatedAt time.Time       `json:"created_at"`
	StartsAt  time.Time       `json:"starts_at"`
	EndsAt    time.Time       `json:"ends_at"`
	ExpiredBy string          `json:"expired_by,omitempty"`
	ExpiredAt time.Time       `json:"expired_at,omitzero"`
}

// Active reports whether s quiets notifications at at.
func (s Silence) Active(at time.Time) bool {
	if !s.ExpiredAt.IsZero() && !at.Before(s.ExpiredAt) {
		return false
	}
	return !at.Before(s.StartsAt) && at.Before(s.EndsAt)
}
