package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// feed stands in for the collector's live feed.
type feed struct{ ch chan cbdash.Event }

func (f *feed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	return []cbdash.Dependency{dep(payments, "a:closed", "b:closed")}, f.ch, func() {}
}

func TestServiceRulesAndDeliveries(t *testing.T) {
	clk := breakertest.NewClock(t0)
	st := storetest.Open(t, clk)
	rcv := newReceiver(t)
	f := &feed{ch: make(chan cbdash.Event)}
	// Rules are evaluated every second of the clock, which the test moves.
	svc, err := alert.New(alert.Config{Source: f, Store: st, Clock: clk, Interval: time.Second, Delivery: alert.DeliveryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	rctx := context.Background()
	created, err := svc.CreateRule(rctx, cbdash.AlertRule{Name: "payments open", Service: "checkout", Breaker: "payments",
		Kind: cbdash.AlertOpen, Hold: time.Minute, WebhookURL: rcv.URL, Format: cbdash.FormatSlack})
	if err != nil {
		t.Fatalf("create rule: %v", err)
	}
	rule := alert.RuleOut(created, nil, true)
	if rule.ID == 0 || rule.Hold != "1m0s" {
		t.Fatalf("created %+v", rule)
	}
	for _, bad := range []alert.RuleJSON{
		{Service: "checkout", Kind: "sometimes", WebhookURL: rcv.URL},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: rcv.URL, Hold: "soon"},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "not a url"},
	} {
		r, err := bad.Rule()
		if err == nil {
			_, err = svc.CreateRule(rctx, r)
		}
		if !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("create %+v: %v, want invalid", bad, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	// A breaker flapping every 4 s for two minutes: open 2 s, closed 2 s.
	for sec := 0; sec < 120; sec++ {
		clk.Set(at(sec))
		state := "a:closed"
		if sec%4 < 2 {
			state = "a:open"
		}
		if sec%4 == 0 {
			f.ch <- cbdash.Event{Kind: cbdash.EventTransition, At: at(sec), Transition: &cbdash.TransitionRecord{Service: "checkout", Instance: "a",
				Transition: protocol.Transition{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: at(sec).UnixMilli()}}}
		}
		f.ch <- depEvent(sec, dep(payments, state, "b:closed"))
	}
	eventually.True(t, "the alert", func() bool { return len(rcv.received()) == 1 })
	clk.Set(at(120 + 61))
	eventually.True(t, "the resolve", func() bool { return len(rcv.received()) >= 2 })
	// The receiver has the resolve before the service has its answer:
	// stop the service only once the delivery is logged (stopping it
	// earlier cancels the request, logged as "context canceled").
	eventually.True(t, "the resolve's delivery logged", func() bool {
		log, err := svc.Deliveries(rctx, cbdash.DeliveryQuery{RuleID: created.ID})
		return err == nil && len(log) == 2 && log[0].Event == cbdash.AlertResolved && log[0].OK
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	bodies := rcv.received()
	if len(bodies) != 2 {
		t.Fatalf("receiver got %d messages, want one alert and one resolve:\n%s", len(bodies), bodies)
	}
	for i, prefix := range []string{"[FIRING] payments open: checkout/payments is open", "[RESOLVED] payments open: checkout/payments"} {
		var m struct{ Text string }
		if err := json.Unmarshal(bodies[i], &m); err != nil || !strings.HasPrefix(m.Text, prefix) {
			t.Errorf("message %d = %s, want text starting %q", i, bodies[i], prefix)
		}
	}
	log, err := svc.Deliveries(rctx, cbdash.DeliveryQuery{RuleID: rule.ID})
	if err != nil {
		t.Fatalf("deliveries: %v", err)
	}
	if len(log) != 2 || log[0].Event != cbdash.AlertResolved || log[1].Event != cbdash.AlertFiring || !log[0].OK || log[1].Status != 200 {
		t.Errorf("delivery log = %+v", log)
	}

	created.Disabled = true
	if err := svc.UpdateRule(rctx, created); err != nil {
		t.Errorf("update: %v", err)
	}
	rules, err := svc.Rules(rctx)
	if err != nil || len(rules) != 1 || !rules[0].Disabled {
		t.Errorf("rules after update = %+v (%v)", rules, err)
	}
	if err := svc.DeleteRule(rctx, rule.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := svc.Rule(rctx, rule.ID); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("get after delete: %v, want not found", err)
	}
}
