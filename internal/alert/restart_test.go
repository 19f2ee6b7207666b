package alert_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// liveFeed is a live feed whose snapshot the test sets; a new
// subscription gets the snapshot of the moment.
type liveFeed struct {
	mu   sync.Mutex
	deps []cbdash.Dependency
}

func (f *liveFeed) set(deps ...cbdash.Dependency) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deps = deps
}

func (f *liveFeed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deps, make(chan cbdash.Event), func() {}
}

// running is a Service started by startService, stopped by stop.
type running struct {
	svc    *alert.Service
	cancel context.CancelFunc
	done   chan error
}

func startService(t *testing.T, cfg alert.Config) *running {
	t.Helper()
	svc, err := alert.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
}

// events decodes the receiver's bodies to "event subject since".
func events(t *testing.T, rcv *receiver) []string {
	t.Helper()
	var out []string
	for _, b := range rcv.received() {
		var m alert.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Event+" "+m.Subject+" since "+m.Since.Sub(t0).String())
	}
	return out
}

// TestFiringStateSurvivesARestart runs the alert service three times on
// one store file: an alert that fired before a restart does not fire
// again while its breaker stays open, it resolves after the restart once
// the breaker closes, and a resolve whose delivery had not completed when
// the service stopped is delivered by the next run, once. It runs in a
// bubble: the ticks, the hold, the backoff and the pending grace are the
// bubble's virtual time, which the test moves (bubbletest.Advance).
func TestFiringStateSurvivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := clocktest.NewRunning()
		path := filepath.Join(t.TempDir(), "cbdash.db")
		st := storetest.OpenFile(t, path, store.Options{Clock: clk})
		rcv := newBubbleReceiver(t)
		rule, err := st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "payments open", Service: "checkout", Breaker: "payments",
			Kind: cbdash.AlertOpen, Hold: 10 * time.Second, WebhookURL: rcv.URL})
		if err != nil {
			t.Fatal(err)
		}
		feed := &liveFeed{}
		feed.set(dep(payments, "a:open", "b:closed"))
		cfg := alert.Config{Source: feed, Store: st, Clock: clk, Interval: time.Second,
			Delivery: rcv.delivery(alert.DeliveryConfig{Backoff: time.Second, Attempts: 5})}
		pendingOf := func() string {
			kept, err := st.FiringAlerts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(kept) != 1 {
				return "none"
			}
			return kept[0].Pending
		}

		first := startService(t, cfg)
		bubbletest.Advance(cfg.Interval) // the first tick
		bubbletest.Settle()
		if n := len(rcv.received()); n != 1 {
			t.Fatalf("the first run sent %d messages at its first tick, want the firing", n)
		}
		var fired alert.Message
		if err := json.Unmarshal(rcv.received()[0], &fired); err != nil {
			t.Fatal(err)
		}
		if p := pendingOf(); p != "" {
			t.Fatalf("pending = %q after the firing was delivered, want it acknowledged in the store", p)
		}
		first.stop()

		// The breaker is still open after the restart: no second firing, and
		// the alert is shown as firing since the first run's moment.
		second := startService(t, cfg)
		synctest.Wait()
		if a := second.svc.Alerts(); len(a) != 1 || a[0].RuleID != rule.ID || !a[0].Since.Equal(fired.Since) {
			t.Fatalf("restored alerts = %+v, want rule %d firing since %s", a, rule.ID, fired.Since)
		}
		bubbletest.Advance(30 * time.Second)
		// The breaker closes while the webhook is down: the resolve is decided
		// after the hold, its first attempt fails, and the service stops
		// during the backoff.
		rcv.mu.Lock()
		rcv.fail = rcv.calls + 1000
		rcv.mu.Unlock()
		feed.set(dep(payments, "a:closed", "b:closed"))
		second.stop()
		second = startService(t, cfg)                     // the snapshot is read on Run
		bubbletest.Advance(10*time.Second + cfg.Interval) // the hold, to a tick
		bubbletest.Settle()
		rcv.mu.Lock()
		calls := rcv.calls
		rcv.mu.Unlock()
		if calls < 2 {
			t.Fatalf("the webhook was called %d times, want the firing and the resolve's attempts", calls)
		}
		if p := pendingOf(); p != cbdash.AlertResolved {
			t.Fatalf("pending = %q, want the resolve pending while its delivery retries", p)
		}
		second.stop()

		rcv.mu.Lock()
		rcv.fail = 0
		rcv.mu.Unlock()
		third := startService(t, cfg)
		// It sends the undelivered resolve again once the pending grace has
		// passed (an old leader might still have been delivering it), and
		// removes the alert's state once it is delivered.
		synctest.Wait()
		if n := len(rcv.received()); n != 1 {
			t.Fatalf("the third run sent the resolve before the pending grace: %d messages", n)
		}
		bubbletest.Advance(alert.DefaultPendingGrace)
		bubbletest.Settle()
		if n := len(rcv.received()); n != 2 {
			t.Fatalf("the third run sent %d messages by the end of the pending grace, want the resolve (2 in all)", n)
		}
		if p := pendingOf(); p != "none" {
			t.Fatalf("pending = %q once the resolve was delivered, want the alert state removed", p)
		}
		bubbletest.Advance(30 * time.Second)
		third.stop()
		got := events(t, rcv)
		since := fired.Since.Sub(t0).String()
		want := []string{"firing checkout/payments since " + since, "resolved checkout/payments since " + since}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("webhook received %q, want %q", got, want)
		}
		if len(third.svc.Alerts()) != 0 {
			t.Errorf("alerts firing after the resolve: %+v", third.svc.Alerts())
		}
	})
}

// TestTestNotificationAnswersOnce sends a test notification to a webhook
// that fails: one attempt, its failure returned, and one that succeeds.
func TestTestNotificationAnswersOnce(t *testing.T) {
	ctx := context.Background()
	clk := breakertest.NewClock(t0)
	st := storetest.Open(t, clk)
	rcv := newReceiver(t)
	rcv.fail = 1
	rule, err := st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "payments open", Service: "checkout", Breaker: "payments",
		Kind: cbdash.AlertOpen, WebhookURL: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := alert.New(alert.Config{Source: &liveFeed{}, Store: st, Clock: clk, Delivery: alert.DeliveryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := svc.Test(ctx, rule.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.OK || d.Attempts != 1 || d.Status != http.StatusServiceUnavailable {
		t.Errorf("test against a failing webhook = %+v, want one failed attempt with 503", d)
	}
	if d, err = svc.Test(ctx, rule.ID); err != nil || !d.OK || d.Event != cbdash.AlertTest {
		t.Fatalf("second test = %+v, %v; want delivered", d, err)
	}
	var m alert.Message
	if err := json.Unmarshal(rcv.received()[0], &m); err != nil || m.Event != cbdash.AlertTest || m.Subject != "checkout/payments" {
		t.Errorf("test body = %s, want event test for checkout/payments", rcv.received()[0])
	}
	if _, err := svc.Test(ctx, 999); err == nil {
		t.Error("a test of an unknown rule succeeded")
	}
}
