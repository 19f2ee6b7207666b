package alert_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// chanFeed is a live feed whose events the test sends.
type chanFeed struct {
	deps []cbdash.Dependency
	ch   chan cbdash.Event
}

func (f *chanFeed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	return f.deps, f.ch, func() {}
}

// TestRetripReportedAfterTheResolveFires: payments trips at 1 s and
// closes at 2 s; its alert fires and resolves after the hold, at a tick
// R. Instance a trips again 500 ms before R, but its batch reaches the
// collector after R (agents report once a second; an agent's clock may
// also be behind the collector's, and is stored as it reports), and the
// leader is replaced before it sees it. The dependency stays open: the
// next leader must fire the alert. The store's resolved episode [1 s, R] must not
// swallow a trip that the leader had not seen when it resolved
// (ClaimFiringAlert refuses since_ms <= R, the engine forgets the alert,
// and every later Evaluate fires, is refused and forgets again: no alert
// while the breaker stays open).
func TestRetripReportedAfterTheResolveFiresAfterATakeover(t *testing.T) {
	synctest.Test(t, testRetripReportedAfterTheResolveFiresAfterATakeover)
}

func testRetripReportedAfterTheResolveFiresAfterATakeover(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.NewRunning()
	st := storetest.Open(t, clk)
	rcv := newBubbleReceiver(t)
	if _, err := st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "checkout open", Service: "checkout",
		Kind: cbdash.AlertOpen, Hold: 10 * time.Second, WebhookURL: rcv.URL}); err != nil {
		t.Fatal(err)
	}
	feed := &chanFeed{deps: []cbdash.Dependency{dep(payments, "a:closed")}, ch: make(chan cbdash.Event)}
	cfg := alert.Config{Source: feed, Store: st, Clock: clk, Interval: time.Second,
		Delivery: rcv.delivery(alert.DeliveryConfig{Backoff: time.Second, Attempts: 5})}
	leader := startService(t, cfg)
	bubbletest.Settle()
	if m, _, err := st.LeaderMark(ctx, alert.MarkName); err != nil || !m.Equal(t0) {
		t.Fatalf("the leader's mark is %v (%v), want its start %v", m, err, t0)
	}

	send := func(ms int64, to string) {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		from := protocol.StateClosed
		if to == protocol.StateClosed {
			from = protocol.StateOpen
		}
		tr := cbdash.TransitionRecord{Service: "checkout", Instance: "a",
			Transition: transition("payments", from, to, ms), ReceivedAt: clk.Now()}
		d := dep(payments, "a:"+to)
		if to == protocol.StateOpen {
			d.OpenSince = at
		}
		feed.ch <- cbdash.Event{Kind: cbdash.EventTransition, At: clk.Now(), Transition: &tr}
		feed.ch <- cbdash.Event{Kind: cbdash.EventDependency, At: clk.Now(), Dependency: &d}
	}
	sleepTo(clk, at(1))
	send(1000, protocol.StateOpen)
	send(2000, protocol.StateClosed)
	// The close was seen at 1 s: the resolve is due at the tick that ends
	// the hold (10 s), not before.
	sleepTo(clk, at(10))
	bubbletest.Settle()
	if n := len(rcv.received()); n != 1 {
		t.Fatalf("the webhook got %d messages before the end of the hold, want the firing only", n)
	}
	sleepTo(clk, at(11))
	bubbletest.Settle()
	if n := len(rcv.received()); n != 2 {
		t.Fatalf("the webhook got %d messages by the end of the hold, want the firing and its resolve", n)
	}
	var m alert.Message
	if err := json.Unmarshal(rcv.received()[1], &m); err != nil {
		t.Fatal(err)
	}
	resolvedAt := m.At // the tick that resolved it
	if !resolvedAt.Equal(at(11)) {
		t.Fatalf("resolved at %v, want at the tick that ends the hold, %v", resolvedAt, at(11))
	}
	if got := events(t, rcv); !slices.Equal(got, []string{"firing checkout/payments since 1s", "resolved checkout/payments since 1s"}) {
		t.Fatalf("webhook calls %q", got)
	}

	// The re-trip, 500 ms before the resolve, reported after it; the
	// leader is replaced meanwhile (a handover or a restart): the next one
	// finds the dependency open since the re-trip.
	leader.stop()
	reTrip := resolvedAt.Add(-500 * time.Millisecond)
	d := dep(payments, "a:open")
	d.OpenSince = reTrip
	feed.deps = []cbdash.Dependency{d}
	storeTransitions(t, st, "a", transition("payments", protocol.StateClosed, protocol.StateOpen, reTrip.Sub(t0).Milliseconds()))
	startService(t, cfg)
	bubbletest.Settle()
	if n := len(rcv.received()); n != 3 {
		t.Fatalf("the webhook got %d messages after the takeover, want the re-trip to fire (the dependency stays open)", n)
	}
}
