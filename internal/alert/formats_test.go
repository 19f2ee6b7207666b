package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
)

// shapeReceiver is a webhook receiver on loopback that checks each body
// against the documented shape of its format and answers as the real
// service does: 200 "ok" (Slack), 202 with a status (PagerDuty), 200
// (generic); 400 with the reason for a body out of shape.
type shapeReceiver struct {
	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
	check  func(r *http.Request, body map[string]any) error
	ok     int
}

func newShapeReceiver(t *testing.T, ok int, check func(*http.Request, map[string]any) error) (*shapeReceiver, string) {
	t.Helper()
	r := &shapeReceiver{check: check, ok: ok}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (s *shapeReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	err := json.Unmarshal(raw, &body)
	if err == nil && r.Header.Get("Content-Type") != "application/json" {
		err = fmt.Errorf("content type %q", r.Header.Get("Content-Type"))
	}
	if err == nil {
		err = s.check(r, body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.bodies, s.paths = append(s.bodies, body), append(s.paths, r.URL.RequestURI())
	s.mu.Unlock()
	w.WriteHeader(s.ok)
}

func str(m map[string]any, k string) string { v, _ := m[k].(string); return v }

// checkSlack is Slack's incoming-webhook shape
// (api.slack.com/messaging/webhooks, Block Kit): a non-empty "text"
// fallback; "blocks" of known types, a section's text object mrkdwn or
// plain_text of at most 3000 characters, a context's elements at most
// 10; no field an incoming webhook ignores.
func checkSlack(_ *http.Request, b map[string]any) error {
	for k := range b {
		if k != "text" && k != "blocks" {
			return fmt.Errorf("unexpected field %q", k)
		}
	}
	if str(b, "text") == "" {
		return errors.New("text (the notification fallback) is required")
	}
	blocks, _ := b["blocks"].([]any)
	if len(blocks) == 0 || len(blocks) > 50 {
		return fmt.Errorf("%d blocks, want 1 to 50", len(blocks))
	}
	for i, x := range blocks {
		if err := checkSlackBlock(x); err != nil {
			return fmt.Errorf("blocks[%d]: %w", i, err)
		}
	}
	return nil
}

func checkSlackBlock(x any) error {
	bl, _ := x.(map[string]any)
	switch str(bl, "type") {
	case "section":
		return checkSlackText(bl["text"], 3000)
	case "context":
		els, _ := bl["elements"].([]any)
		if len(els) == 0 || len(els) > 10 {
			return fmt.Errorf("%d context elements, want 1 to 10", len(els))
		}
		for _, e := range els {
			if err := checkSlackText(e, 3000); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("block type %q", str(bl, "type"))
}

func checkSlackText(x any, limit int) error {
	t, _ := x.(map[string]any)
	if ty := str(t, "type"); ty != "mrkdwn" && ty != "plain_text" {
		return fmt.Errorf("text type %q", ty)
	}
	if n := len(str(t, "text")); n == 0 || n > limit {
		return fmt.Errorf("text of %d characters, want 1 to %d", n, limit)
	}
	return nil
}

// checkPagerDuty is the PagerDuty Events API v2 shape
// (developer.pagerduty.com, events-api-v2 trigger and resolve events):
// a 32-character routing_key, event_action trigger, acknowledge or
// resolve, a dedup_key of at most 255 characters; a trigger's payload
// with a summary (at most 1024), a source and a severity (critical,
// error, warning, info) and an RFC 3339 timestamp; links with href. The
// routing key is not in the URL posted to.
func checkPagerDuty(r *http.Request, b map[string]any) error {
	if r.URL.Path != "/v2/enqueue" || r.URL.Query().Has("routing_key") {
		return fmt.Errorf("posted to %s, want /v2/enqueue without the routing key", r.URL.RequestURI())
	}
	if n := len(str(b, "routing_key")); n != 32 {
		return fmt.Errorf("routing_key of %d characters, want 32", n)
	}
	if n := len(str(b, "dedup_key")); n == 0 || n > 255 {
		return fmt.Errorf("dedup_key of %d characters", n)
	}
	switch str(b, "event_action") {
	case "resolve", "acknowledge":
		return nil
	case "trigger":
		return checkPagerDutyTrigger(b)
	}
	return fmt.Errorf("event_action %q", str(b, "event_action"))
}

func checkPagerDutyTrigger(b map[string]any) error {
	p, _ := b["payload"].(map[string]any)
	if n := len(str(p, "summary")); n == 0 || n > 1024 {
		return fmt.Errorf("payload.summary of %d characters", n)
	}
	if str(p, "source") == "" {
		return errors.New("payload.source is required")
	}
	switch str(p, "severity") {
	case "critical", "error", "warning", "info":
	default:
		return fmt.Errorf("payload.severity %q", str(p, "severity"))
	}
	if _, err := time.Parse(time.RFC3339, str(p, "timestamp")); err != nil {
		return fmt.Errorf("payload.timestamp: %w", err)
	}
	links, _ := b["links"].([]any)
	for _, l := range links {
		if str(l.(map[string]any), "href") == "" {
			return errors.New("a link without href")
		}
	}
	return nil
}

// checkGeneric is cbdash's generic JSON (alert.Message, documented in
// docs/alerts.md).
func checkGeneric(_ *http.Request, b map[string]any) error {
	for _, k := range []string{"event", "rule", "kind", "subject", "service", "text", "at", "since", "url"} {
		if str(b, k) == "" {
			return fmt.Errorf("%s is required", k)
		}
	}
	if _, ok := b["rule_id"].(float64); !ok {
		return errors.New("rule_id is required")
	}
	return nil
}

// TestPayloadFormatsMatchTheirReceivers delivers a firing, a flapping
// message and a resolve in each format to a receiver on loopback that
// checks the documented shape; each carries the link to the dependency
// page at the external URL, and the flapping message, whose incident is
// known, the link to the incident page.
func TestPayloadFormatsMatchTheirReceivers(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	const link = "https://cbdash.example/dependency?breaker=payments&service=checkout"
	for _, tt := range []struct {
		format string
		ok     int
		check  func(*http.Request, map[string]any) error
		path   string
		linked func(map[string]any) bool
	}{
		{cbdash.FormatJSON, http.StatusOK, checkGeneric, "/hook", func(b map[string]any) bool { return b["url"] == link }},
		{cbdash.FormatSlack, http.StatusOK, checkSlack, "/services/T0/B0/x", func(b map[string]any) bool {
			return strings.Contains(fmt.Sprint(b["blocks"]), "<"+link+"|Open checkout/payments on cbdash>")
		}},
		{cbdash.FormatPagerDuty, http.StatusAccepted, checkPagerDuty, "/v2/enqueue?routing_key=" + key, func(b map[string]any) bool {
			return b["event_action"] == "resolve" || strings.Contains(fmt.Sprint(b["links"]), "href:"+link)
		}},
	} {
		t.Run(tt.format, func(t *testing.T) {
			rcv, base := newShapeReceiver(t, tt.ok, tt.check)
			d, err := alert.NewDeliverer(alert.DeliveryConfig{AllowPrivate: true, Attempts: 1, ExternalURL: "https://cbdash.example/"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rule := cbdash.AlertRule{ID: 4, Name: "payments open", Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: base + tt.path, Format: tt.format}
			for _, n := range []alert.Notification{
				{Rule: rule, Subject: "checkout/payments", Event: cbdash.AlertFiring, At: at(0), Since: at(0), Detail: "checkout/payments is open on 2 of 3 instances"},
				{Rule: rule, Subject: "checkout/payments", Event: cbdash.AlertFlapping, At: at(90), Since: at(0), Now: "checkout/payments is flapping: opened 6 times", Incident: 12},
				{Rule: rule, Subject: "checkout/payments", Event: cbdash.AlertResolved, At: at(300), Since: at(0), Now: "checkout/payments is closed again after 3m"},
			} {
				entry, err := d.Deliver(context.Background(), n)
				if err != nil || !entry.OK {
					t.Fatalf("%s: %+v (%v), want delivered in shape", n.Event, entry, err)
				}
			}
			for i, b := range rcv.bodies {
				if !tt.linked(b) {
					t.Errorf("body %d = %v, want the link %s", i, b, link)
				}
			}
			// The flapping message knows its incident: it links to it too.
			const incident = "https://cbdash.example/incidents/12"
			if !strings.Contains(fmt.Sprint(rcv.bodies[1]), incident) || strings.Contains(fmt.Sprint(rcv.bodies[0]), "/incidents/") {
				t.Errorf("the firing %v and the flapping message %v: want the incident link %s in the second only", rcv.bodies[0], rcv.bodies[1], incident)
			}
			if tt.format == cbdash.FormatPagerDuty {
				if rcv.bodies[0]["dedup_key"] != rcv.bodies[2]["dedup_key"] || rcv.bodies[2]["event_action"] != "resolve" {
					t.Errorf("the trigger and the resolve = %v, %v: want one dedup_key", rcv.bodies[0], rcv.bodies[2])
				}
			}
		})
	}
}
