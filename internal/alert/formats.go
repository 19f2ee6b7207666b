package alert

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbdash/cbdash"
)

// Message is the generic JSON body of a webhook call (format "json").
type Message struct {
	Event   string    `json:"event"` // "firing", "flapping", "resolved" or "test"
	RuleID  int64     `json:"rule_id"`
	Rule    string    `json:"rule"` // the rule's name
	Kind    string    `json:"kind"` // the rule's kind
	Subject string    `json:"subject"`
	Service string    `json:"service"`
	Breaker string    `json:"breaker,omitempty"`
	Text    string    `json:"text"` // one line for humans
	At      time.Time `json:"at"`
	Since   time.Time `json:"since"` // when the alert started firing
	// Now, on a resolve, says what the subject is now (the breaker's
	// states, "closed again after 3m out of closed"); on a flapping
	// message, the summary (how many opens since when).
	Now string `json:"now,omitempty"`
	// URL is the subject's page on the dashboard (the serve flag
	// --external-url; absent without it).
	URL string `json:"url,omitempty"`
	// IncidentURL, for an open alert with a link, is the page of the
	// incident of that open once one exists (absent before, and without
	// --external-url).
	IncidentURL string `json:"incident_url,omitempty"`
	// Subjects, on a grouped rule's message (subject "*/payments" or
	// "checkout/*"), are the alerts it stands for.
	Subjects []string `json:"subjects,omitempty"`
}

// slackMessage is a Slack incoming-webhook body (format "slack"): text
// is the notification's fallback and the whole message for clients
// without Block Kit; blocks holds one mrkdwn section (Slack's limit for a
// section's text is 3000 characters) and, with a link, a context block.
// See https://api.slack.com/messaging/webhooks and
// https://api.slack.com/reference/block-kit/blocks.
type slackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`               // "section" or "context"
	Text     *slackText  `json:"text,omitempty"`     // section
	Elements []slackText `json:"elements,omitempty"` // context
}

type slackText struct {
	Type string `json:"type"` // "mrkdwn"
	Text string `json:"text"`
}

// pdEvent is a PagerDuty Events API v2 event (format "pagerduty"),
// POSTed to the rule's webhook URL without its routing_key query
// parameter, which becomes the event's routing_key. A firing triggers,
// a resolve resolves, both with dedup_key "cbdash/<rule id>/<subject>"
// (at most 255 characters); a flapping message triggers again with the
// same key (PagerDuty folds it into the open alert). See
// https://developer.pagerduty.com/docs/events-api-v2/trigger-events/.
type pdEvent struct {
	RoutingKey  string     `json:"routing_key"`
	EventAction string     `json:"event_action"` // "trigger" or "resolve"
	DedupKey    string     `json:"dedup_key"`
	Payload     *pdPayload `json:"payload,omitempty"` // trigger only
	Client      string     `json:"client,omitempty"`
	ClientURL   string     `json:"client_url,omitempty"`
	Links       []pdLink   `json:"links,omitempty"`
}

type pdPayload struct {
	Summary       string         `json:"summary"` // at most 1024 characters
	Source        string         `json:"source"`
	Severity      string         `json:"severity"` // "critical", "warning" or "info"
	Timestamp     string         `json:"timestamp"`
	Component     string         `json:"component,omitempty"`
	Group         string         `json:"group,omitempty"`
	Class         string         `json:"class,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
}

type pdLink struct {
	Href string `json:"href"`
	Text string `json:"text"`
}

// Body renders the webhook body of n in its rule's format (FormatJSON,
// FormatSlack or FormatPagerDuty), linking to the subject's page at
// external ("" = no link), and to its incident's (n.Incident) when it
// has one.
func Body(n Notification, external string) ([]byte, error) {
	link := Link(external, n.Subject)
	switch n.Rule.Format {
	case cbdash.FormatSlack:
		return json.Marshal(slackBody(n, link, IncidentLink(external, n.Incident)))
	case cbdash.FormatPagerDuty:
		return json.Marshal(pagerDutyBody(n, link, external))
	}
	m := Message{Event: n.Event, RuleID: n.Rule.ID, Rule: n.Rule.Name, Kind: n.Rule.Kind, Subject: n.Subject,
		Service: n.Rule.Service, Text: textOf(n), At: n.At.UTC(), Since: n.Since.UTC(), Now: n.Now, URL: link,
		IncidentURL: IncidentLink(external, n.Incident), Subjects: n.Members}
	if svc, br, ok := strings.Cut(n.Subject, "/"); ok {
		m.Service, m.Breaker = svc, br
	}
	return json.Marshal(m)
}

func slackBody(n Notification, link, incident string) slackMessage {
	text := textOf(n)
	m := slackMessage{Text: slackEscape(text), Blocks: []slackBlock{{Type: "section", Text: &slackText{Type: "mrkdwn", Text: clip(slackEscape(text), 3000)}}}}
	if link != "" {
		ctx := slackBlock{Type: "context", Elements: []slackText{{Type: "mrkdwn",
			Text: "<" + link + "|Open " + slackEscape(n.Subject) + " on cbdash>"}}}
		if incident != "" {
			ctx.Elements = append(ctx.Elements, slackText{Type: "mrkdwn", Text: "<" + incident + "|Incident #" + strconv.FormatInt(n.Incident, 10) + ">"})
		}
		m.Blocks = append(m.Blocks, ctx)
	}
	return m
}

// slackEscape escapes the three characters Slack reads as markup.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func pagerDutyBody(n Notification, link, external string) pdEvent {
	e := pdEvent{RoutingKey: routingKey(n.Rule.WebhookURL), DedupKey: clip(fmt.Sprintf("cbdash/%d/%s", n.Rule.ID, n.Subject), 255),
		EventAction: "trigger", Client: "cbdash", ClientURL: external}
	if n.Event == cbdash.AlertResolved {
		e.EventAction = "resolve"
		return e
	}
	svc, br, _ := strings.Cut(n.Subject, "/")
	severity := "critical"
	switch {
	case n.Event == cbdash.AlertTest:
		severity = "info"
	case n.Rule.Kind == cbdash.AlertHeadroom || n.Rule.Kind == cbdash.AlertStale:
		severity = "warning"
	}
	e.Payload = &pdPayload{Summary: clip(textOf(n), 1024), Source: svc, Severity: severity, Timestamp: n.At.UTC().Format(time.RFC3339),
		Component: br, Group: svc, Class: n.Rule.Kind,
		CustomDetails: map[string]any{"rule": n.Rule.Name, "event": n.Event, "since": n.Since.UTC().Format(time.RFC3339), "detail": n.Detail, "now": n.Now}}
	if link != "" {
		e.Links = []pdLink{{Href: link, Text: "Open " + n.Subject + " on cbdash"}}
	}
	if inc := IncidentLink(external, n.Incident); inc != "" {
		e.Links = append(e.Links, pdLink{Href: inc, Text: "Incident #" + strconv.FormatInt(n.Incident, 10) + " on cbdash"})
	}
	return e
}

// routingKey is the routing_key query parameter of a pagerduty rule's
// webhook URL.
func routingKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get("routing_key")
}

// postURL is where r's notifications are POSTed: its webhook URL, for a
// pagerduty rule without the routing_key parameter (it goes in the body).
func postURL(r cbdash.AlertRule) string {
	if r.Format != cbdash.FormatPagerDuty {
		return r.WebhookURL
	}
	u, err := url.Parse(r.WebhookURL)
	if err != nil {
		return r.WebhookURL
	}
	q := u.Query()
	q.Del("routing_key")
	u.RawQuery = q.Encode()
	return u.String()
}

// clip cuts s to at most n bytes on a rune boundary, ending with "…" when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// textOf is n in one line for humans.
func textOf(n Notification) string {
	name := n.Rule.Name
	if name == "" {
		name = n.Rule.Kind
	}
	switch n.Event {
	case cbdash.AlertResolved:
		now := n.Now
		if now == "" {
			now = n.Subject
		}
		return fmt.Sprintf("[RESOLVED] %s: %s (fired %s, firing for %s)", name, now,
			n.Since.UTC().Format(time.RFC3339), n.At.Sub(n.Since).Truncate(time.Second))
	case cbdash.AlertFlapping:
		return fmt.Sprintf("[FLAPPING] %s: %s", name, n.Now)
	}
	return fmt.Sprintf("[FIRING] %s: %s", name, n.Detail)
}
