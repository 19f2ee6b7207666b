package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestAlertsFromARealCollector trips a real breaker whose agent reports to
// a real collector on loopback: the open rule fires and resolves after a
// reset, and the stale rule fires when the agent goes away.
func TestAlertsFromARealCollector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cbdash.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	col, err := collector.New(collector.Config{Store: st, PublishInterval: 50 * time.Millisecond, StaleAfter: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	col.Mount(e, collector.Auth{})
	hs := httptest.NewUnstartedServer(e)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	defer hs.Close()

	rcv := newReceiver(t)
	for _, r := range []cbdash.AlertRule{
		{Name: "payments open", Service: "checkout", Breaker: "payments", Kind: cbdash.AlertOpen, Hold: 300 * time.Millisecond, WebhookURL: rcv.URL},
		{Name: "checkout stale", Service: "checkout", Kind: cbdash.AlertStale, Hold: 300 * time.Millisecond, WebhookURL: rcv.URL},
	} {
		if _, err := st.CreateAlertRule(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := alert.New(alert.Config{Source: col, Store: st, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = col.Run(ctx); done <- struct{}{} }()
	go func() { _ = svc.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	tok, err := st.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 10}, MinimumCalls: 5, OpenDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: "ws" + strings.TrimPrefix(hs.URL, "http") + "/api/v1/agent", Token: tok,
		Service: "checkout", Instance: "checkout-1", ReportInterval: 50 * time.Millisecond})
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
	waitFor(t, "the open alert", func() bool { return len(texts()) >= 1 })
	if _, err := b.Apply(breaker.Command{Action: breaker.ActionReset}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resolve", func() bool { return len(texts()) >= 2 })
	if err := a.Close(context.Background()); err != nil {
		t.Logf("closing the agent: %v", err)
	}
	closed = true
	waitFor(t, "the stale alert", func() bool { return len(texts()) >= 3 })
	got := strings.Join(texts(), "; ")
	if want := "firing checkout/payments; resolved checkout/payments; firing checkout@checkout-1"; got != want {
		t.Errorf("webhook got %q, want %q", got, want)
	}
}
