package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestAlertsFromARealCollector trips a real breaker whose agent reports to
// a real collector on loopback: the open rule fires and resolves after a
// reset, and the stale rule fires when the agent goes away. Breaker,
// agent, collector and alerts share a clock running from the test epoch.
func TestAlertsFromARealCollector(t *testing.T) {
	clk := clocktest.NewRunning()
	stack := stacktest.Start(t, stacktest.Options{Clock: clk, Collector: func(c *collector.Config) {
		c.PublishInterval, c.StaleAfter = 50*time.Millisecond, 500*time.Millisecond
	}})
	col, st := stack.Collector, stack.Store
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rcv := newReceiver(t)
	for _, r := range []cbdash.AlertRule{
		{Name: "payments open", Service: "checkout", Breaker: "payments", Kind: cbdash.AlertOpen, Hold: 300 * time.Millisecond, WebhookURL: rcv.URL},
		{Name: "checkout stale", Service: "checkout", Kind: cbdash.AlertStale, Hold: 300 * time.Millisecond, WebhookURL: rcv.URL},
	} {
		if _, err := st.CreateAlertRule(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := alert.New(alert.Config{Source: col, Store: st, Clock: clk, Interval: 20 * time.Millisecond, Delivery: alert.DeliveryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	b, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 10}, MinimumCalls: 5, OpenDuration: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: stack.AgentURL(), Token: stack.AgentToken,
		Service: "checkout", Instance: "checkout-1", ReportInterval: 50 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Register(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = a.Close(context.Background())
		}
	}()

	texts := func() []string {
		var out []string
		for _, body := range rcv.received() {
			var m alert.Message
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m.Event+" "+m.Subject)
		}
		return out
	}
	for range 10 {
		_ = b.Execute(ctx, func(context.Context) error { return errors.New("payments down") })
	}
	eventually.True(t, "the open alert", func() bool { return len(texts()) >= 1 })
	if _, err := b.Apply(breaker.Command{Action: breaker.ActionReset}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the resolve", func() bool { return len(texts()) >= 2 })
	if err := a.Close(context.Background()); err != nil {
		t.Logf("closing the agent: %v", err)
	}
	closed = true
	eventually.True(t, "the stale alert", func() bool { return len(texts()) >= 3 })
	got := strings.Join(texts(), "; ")
	if want := "firing checkout/payments; resolved checkout/payments; firing checkout@checkout-1"; got != want {
		t.Errorf("webhook got %q, want %q", got, want)
	}
}
