package collector

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Alerts about single instances over two collectors (issue 36): the
// leader (A) holds lines of its own instances only; the stale and
// half-open rules also read the store's lines of B's instances.

// jumpClock is a running clock (clocktest.Running) that a test moves
// ahead at once (jump): the collectors' and the alert Service's one
// clock, so that an instance silent since a moment ago is silent for the
// stale timeout without the test waiting that long. Its timers and
// tickers are real ones.
type jumpClock struct {
	r   *clocktest.Running
	off atomic.Int64 // ns
}

func (c *jumpClock) Now() time.Time                                    { return c.r.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) AfterFunc(d time.Duration, f func()) breaker.Timer { return c.r.AfterFunc(d, f) }
func (c *jumpClock) jump(d time.Duration)                              { c.off.Add(int64(d)) }

// NewTicker ticks as the running clock's, delivering this clock's time.
func (c *jumpClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	in, stop := c.r.NewTicker(d)
	out := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-in:
				select {
				case out <- c.Now():
				default:
				}
			}
		}
	}()
	var once sync.Once
	return out, func() { once.Do(func() { stop(); close(done) }) }
}

// alertHook is a webhook receiver that passes on each message.
type alertHook struct {
	url string
	got chan alert.Message
}

func newAlertHook(t *testing.T) *alertHook {
	h := &alertHook{got: make(chan alert.Message, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m alert.Message
		if err := json.Unmarshal(b, &m); err == nil {
			select {
			case h.got <- m:
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// await returns the first message with event and subject; a message of
// one of the subjects in not fails the test.
func (h *alertHook) await(t *testing.T, event, subject string, not ...string) alert.Message {
	t.Helper()
	deadline := time.After(time.Minute) // a bound for a broken build only: the wait is on the messages
	for {
		select {
		case m := <-h.got:
			for _, n := range not {
				if m.Subject == n {
					t.Fatalf("an alert about %s: %s (%s)", n, m.Event, m.Text)
				}
			}
			if m.Event == event && m.Subject == subject {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s alert about %s", event, subject)
		}
	}
}

// startAlerts runs A's alert Service (as cbdash serve wires it: Members
// is the collector) with rule r delivered to a new hook.
func startAlerts(t *testing.T, a *harness, clk *jumpClock, r cbdash.AlertRule) *alertHook {
	t.Helper()
	hook := newAlertHook(t)
	r.WebhookURL = hook.url
	if _, err := a.store.CreateAlertRule(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	svc, err := alert.New(alert.Config{Source: a.col, Members: a.col, Store: a.store, Clock: clk, Interval: 100 * time.Millisecond,
		Delivery: alert.DeliveryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("alert service: %v", err)
		}
	})
	return hook
}

// TestAStaleAlertFiresOnTheLeaderForAnInstanceOfTheOtherCollector: b1
// and b2 report to B; b1 stops, b2 goes on. Past the stale timeout, A's
// alert Service fires for b1, not b2.
func TestAStaleAlertFiresOnTheLeaderForAnInstanceOfTheOtherCollector(t *testing.T) {
	t.Parallel()
	clk := &jumpClock{r: clocktest.NewRunning()}
	a, b := twoCollectors(t, "stalea", "staleb", func(c *Config) { c.Clock = clk })
	connect(t, b, "b1", 10, 0)
	b2 := connect(t, b, "b2", 10, 0)
	waitForBsPart(t, a, 2, 20)

	clk.jump(20 * time.Second) // past the stale timeout (15 s) and the store's last-seen period (5 s)
	b2.send(b.batch(2, 10, 0))
	b2.expect(protocol.TypeAck, new(protocol.Ack)) // b2's last-seen time is stored
	hook := startAlerts(t, a, clk, cbdash.AlertRule{Name: "stale api", Service: "api", Kind: cbdash.AlertStale})
	m := hook.await(t, cbdash.AlertFiring, "api@b1", "api@b2")
	if m.Kind != cbdash.AlertStale {
		t.Fatalf("A's alert about b1: kind %q, want %q", m.Kind, cbdash.AlertStale)
	}
}

// TestAHalfOpenAlertFiresOnTheLeaderForAnInstanceOfTheOtherCollector:
// b1 on B trips and goes half-open, and stays half-open past the rule's
// 10 s while it reports; A's alert Service fires for api/db.
func TestAHalfOpenAlertFiresOnTheLeaderForAnInstanceOfTheOtherCollector(t *testing.T) {
	t.Parallel()
	clk := &jumpClock{r: clocktest.NewRunning()}
	a, b := twoCollectors(t, "halfa", "halfb", func(c *Config) { c.Clock = clk })
	connect(t, a, "a1", 10, 0)
	b1 := connect(t, b, "b1", 10, 0)
	b1.send(b.batch(2, 10, 10, b.trans(protocol.StateClosed, protocol.StateOpen, 1), b.trans(protocol.StateOpen, protocol.StateHalfOpen, 1)))
	b1.expect(protocol.TypeAck, new(protocol.Ack))

	clk.jump(20 * time.Second)
	half := b.batch(3, 1, 0)
	half.Windows[0].State = protocol.StateHalfOpen
	b1.send(half)
	b1.expect(protocol.TypeAck, new(protocol.Ack)) // b1 reports (not stale), still half-open
	hook := startAlerts(t, a, clk, cbdash.AlertRule{Name: "half-open api", Service: "api", Breaker: "db", Kind: cbdash.AlertHalfOpenLong,
		For: 10 * time.Second})
	m := hook.await(t, cbdash.AlertFiring, "api/db")
	if m.Kind != cbdash.AlertHalfOpenLong {
		t.Fatalf("A's alert about api/db: kind %q, want %q (%s)", m.Kind, cbdash.AlertHalfOpenLong, m.Text)
	}
}
