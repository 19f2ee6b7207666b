package alert_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// checkByPath checks a body against the shape of the format its path
// is for: /hook generic JSON, /services/... Slack, /v2/enqueue
// PagerDuty.
func checkByPath(r *http.Request, b map[string]any) error {
	switch {
	case r.URL.Path == "/hook":
		return checkGeneric(r, b)
	case strings.HasPrefix(r.URL.Path, "/services/"):
		return checkSlack(r, b)
	}
	return checkPagerDuty(r, b)
}

// TestOpenAlertPayloadsLinkToTheIncident is the incident link of issue
// 33 on the real stack (collector, store, the incident Service and the
// alert Service on one clock): a breaker opens and flaps; once its
// incident exists, every payload of the open rule, in each format,
// carries the incident's page beside the dependency's, each in the shape
// its receiver checks; no payload links to another incident.
func TestOpenAlertPayloadsLinkToTheIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := &shapeReceiver{check: checkByPath, ok: http.StatusOK}
		srv := bubbletest.NewServer(t, rcv)
		ctx := context.Background()
		const key = "0123456789abcdef0123456789abcdef"
		for _, r := range []struct{ format, path string }{
			{cbdash.FormatJSON, "/hook"}, {cbdash.FormatSlack, "/services/T0/B0/x"}, {cbdash.FormatPagerDuty, "/v2/enqueue?routing_key=" + key},
		} {
			if _, err := f.st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "inventory open", Service: "inventory", Breaker: "db",
				Kind: cbdash.AlertOpen, Hold: 30 * time.Second, Format: r.format, WebhookURL: srv.URL + r.path}); err != nil {
				t.Fatal(err)
			}
		}
		incidents, err := incident.NewService(incident.ServiceConfig{Source: f.col, Store: f.st, Clock: f.clk})
		if err != nil {
			t.Fatal(err)
		}
		ictx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- incidents.Run(ictx) }()
		defer func() { stop(); <-done }()
		startService(t, alert.Config{Source: f.col, Store: f.st, Clock: f.clk, Interval: time.Second,
			ExternalURL: "https://cbdash.example", Delivery: alert.DeliveryConfig{Client: srv.Client, AllowPrivate: true}})

		const inst = "inventory-1"
		f.run(5*time.Second, inst)
		for range 7 { // flapping from the sixth open
			f.report(inst, protocol.StateOpen)
			f.run(10*time.Second, inst)
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
			f.run(10*time.Second, inst)
		}
		f.run(3*time.Minute, inst) // settles
		incs, err := f.st.Incidents(ctx, cbdash.IncidentQuery{Service: "inventory", Breaker: "db"})
		if err != nil || len(incs) != 1 {
			t.Fatalf("incidents = %+v, %v: want the one of the flapping", incs, err)
		}
		incLink := fmt.Sprintf("https://cbdash.example/incidents/%d", incs[0].ID)
		const depLink = "https://cbdash.example/dependency?breaker=db&service=inventory"

		rcv.mu.Lock()
		bodies, paths := rcv.bodies, rcv.paths
		rcv.mu.Unlock()
		seen := map[string]int{}
		for i, b := range bodies {
			format := map[bool]string{true: "json", false: "slack"}[paths[i] == "/hook"]
			if strings.HasPrefix(paths[i], "/v2/") {
				format = "pagerduty"
			}
			event := str(b, "event")
			switch format {
			case "slack":
				event = strings.ToLower(strings.Trim(strings.Fields(str(b, "text"))[0], "[]"))
			case "pagerduty":
				event = str(b, "event_action")
				if p, ok := b["payload"].(map[string]any); ok {
					event = fmt.Sprint(p["custom_details"].(map[string]any)["event"])
				}
			}
			seen[format+" "+event]++
			all := fmt.Sprint(b)
			if strings.Contains(all, "/incidents/") && !strings.Contains(all, incLink) {
				t.Errorf("%s %s links to another incident: %v", format, event, b)
			}
			if event == "resolve" { // PagerDuty's resolve carries no links
				continue
			}
			if !strings.Contains(all, depLink) {
				t.Errorf("%s %s lacks the dependency link: %v", format, event, b)
			}
			if event == cbdash.AlertFiring { // sent at the open: the incident may not be stored yet
				continue
			}
			switch format {
			case "json":
				if b["incident_url"] != incLink {
					t.Errorf("json %s: incident_url %v, want %s", event, b["incident_url"], incLink)
				}
			case "slack":
				if !strings.Contains(all, "<"+incLink+fmt.Sprintf("|Incident #%d>", incs[0].ID)) {
					t.Errorf("slack %s lacks the incident link in its context block: %v", event, b)
				}
			case "pagerduty":
				if !strings.Contains(fmt.Sprint(b["links"]), "href:"+incLink) {
					t.Errorf("pagerduty %s: links %v, want the incident's", event, b["links"])
				}
			}
		}
		for _, want := range []string{"json firing", "json flapping", "json resolved", "slack firing", "slack flapping", "slack resolved",
			"pagerduty firing", "pagerduty flapping", "pagerduty resolve"} {
			if seen[want] != 1 {
				t.Errorf("%d %q messages, want 1 (all: %v)", seen[want], want, seen)
			}
		}
	})
}
