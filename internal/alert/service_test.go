package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sleepTo sleeps, in a synctest bubble, until clk (a clocktest.Running
// made in the bubble) reads at.
func sleepTo(clk *clocktest.Running, at time.Time) { bubbletest.Advance(at.Sub(clk.Now())) }

// feed stands in for the collector's live feed.
type feed struct{ ch chan cbdash.Event }

func (f *feed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	return []cbdash.Dependency{dep(payments, "a:closed", "b:closed")}, f.ch, func() {}
}

// TestServiceRulesAndDeliveries runs in a bubble: the service's ticks,
// the rule's hold and the clock are the bubble's virtual time, which the
// test moves by sleeping.
func TestServiceRulesAndDeliveries(t *testing.T) { synctest.Test(t, testServiceRulesAndDeliveries) }

func testServiceRulesAndDeliveries(t *testing.T) {
	clk := clocktest.NewRunning()
	st := storetest.Open(t, clk)
	rcv := newBubbleReceiver(t)
	f := &feed{ch: make(chan cbdash.Event)}
	// Rules are evaluated every second of the clock.
	svc, err := alert.New(alert.Config{Source: f, Store: st, Clock: clk, Interval: time.Second, Delivery: rcv.delivery(alert.DeliveryConfig{})})
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
		sleepTo(clk, at(sec))
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
	synctest.Wait()
	if n := len(rcv.received()); n != 2 {
		t.Fatalf("the receiver got %d messages while the breaker flapped, want the alert and one flapping message", n)
	}
	// Flapping settles after FlapWindow/FlapCount (10m/5 = 2m, more
	// than the rule's hold) after the breaker was last seen open, at a tick.
	sleepTo(clk, at(120+121))
	bubbletest.Settle()
	// The receiver has the resolve before the service has its answer:
	// stop the service only once the delivery is logged (stopping it
	// earlier cancels the request, logged as "context canceled").
	if log, err := svc.Deliveries(rctx, cbdash.DeliveryQuery{RuleID: created.ID}); err != nil || len(log) != 3 || log[0].Event != cbdash.AlertResolved || !log[0].OK {
		t.Fatalf("delivery log after the hold = %+v (%v), want the resolve delivered and logged", log, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	bodies := rcv.received()
	if len(bodies) != 3 {
		t.Fatalf("receiver got %d messages, want one alert, one flapping and one resolve:\n%s", len(bodies), bodies)
	}
	for i, prefix := range []string{"[FIRING] payments open: checkout/payments is open",
		"[FLAPPING] payments open: checkout/payments is flapping: opened 6 times in 20s since",
		"[RESOLVED] payments open: settled after flapping (opened 30 times since"} {
		var m struct{ Text string }
		if err := json.Unmarshal(bodies[i], &m); err != nil || !strings.HasPrefix(m.Text, prefix) {
			t.Errorf("message %d = %s, want text starting %q", i, bodies[i], prefix)
		}
	}
	log, err := svc.Deliveries(rctx, cbdash.DeliveryQuery{RuleID: rule.ID})
	if err != nil {
		t.Fatalf("deliveries: %v", err)
	}
	if len(log) != 3 || log[0].Event != cbdash.AlertResolved || log[1].Event != cbdash.AlertFlapping || log[2].Event != cbdash.AlertFiring ||
		!log[0].OK || log[2].Status != 200 {
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
