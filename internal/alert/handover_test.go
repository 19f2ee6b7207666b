package alert_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// storeTransitions stores, for instance inst of service checkout, one
// batch per transition (from -> to at ms after t0), received at its time.
func storeTransitions(t *testing.T, st *store.Store, inst string, trs ...protocol.Transition) {
	t.Helper()
	ctx := context.Background()
	started := t0.Add(-time.Hour).UnixMilli()
	h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: inst, SDKVersion: "test",
		StartedAt: started, Breakers: []protocol.BreakerConfig{
			{Name: "payments", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1},
			{Name: "ledger", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}}
	if err := st.SaveHello(ctx, h, t0); err != nil {
		t.Fatal(err)
	}
	for i, tr := range trs {
		b := protocol.Batch{Type: protocol.TypeBatch, Seq: uint64(i + 1), SentAt: tr.At, Transitions: []protocol.Transition{tr}}
		if _, err := st.SaveBatch(ctx, "checkout", inst, started, b, time.UnixMilli(tr.At)); err != nil {
			t.Fatal(err)
		}
	}
}

func transition(breaker, from, to string, ms int64) protocol.Transition {
	cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
	if to == protocol.StateClosed {
		cause = protocol.Cause{Kind: protocol.CauseProbesSucceeded}
	}
	return protocol.Transition{Breaker: breaker, From: from, To: to, At: t0.Add(time.Duration(ms) * time.Millisecond).UnixMilli(), Cause: cause}
}

// TestTakeoverAlertsTripsStoredWhileNoLeaderRanOnce: while no leader
// runs, payments opens and closes within 400 ms on instance a, and
// ledger within 600 ms on b (transitions stored, no live event). The next
// leader fires both alerts, since the trips' times, and resolves both
// after the rule's hold: four webhook calls. A restart whose margin
// replays the same trips sends nothing more. It runs in a bubble: the
// ticks and the hold are virtual time, which the test moves by sleeping.
func TestTakeoverAlertsTripsStoredWhileNoLeaderRanOnce(t *testing.T) {
	synctest.Test(t, testTakeoverAlertsTripsStoredWhileNoLeaderRanOnce)
}

func testTakeoverAlertsTripsStoredWhileNoLeaderRanOnce(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.NewRunning()
	st := storetest.Open(t, clk)
	rcv := newBubbleReceiver(t)
	if _, err := st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "checkout open", Service: "checkout",
		Kind: cbdash.AlertOpen, Hold: 10 * time.Second, WebhookURL: rcv.URL}); err != nil {
		t.Fatal(err)
	}
	ledger := cbdash.DependencyKey{Service: "checkout", Breaker: "ledger"}
	feed := &liveFeed{}
	feed.set(dep(payments, "a:closed", "b:closed"), dep(ledger, "a:closed", "b:closed"))
	cfg := alert.Config{Source: feed, Store: st, Clock: clk, Interval: time.Second,
		Delivery: rcv.delivery(alert.DeliveryConfig{Backoff: time.Second, Attempts: 5})}
	checkMark := func(what string, want time.Time) {
		t.Helper()
		if m, _, err := st.LeaderMark(ctx, alert.MarkName); err != nil || !m.Equal(want) {
			t.Fatalf("%s: the mark is %v (%v), want %v", what, m, err, want)
		}
	}

	first := startService(t, cfg)
	bubbletest.Settle()
	checkMark("the first leader", t0)
	first.stop() // the leader is gone

	storeTransitions(t, st, "a", transition("payments", protocol.StateClosed, protocol.StateOpen, 1000),
		transition("payments", protocol.StateOpen, protocol.StateClosed, 1400))
	storeTransitions(t, st, "b", transition("ledger", protocol.StateClosed, protocol.StateOpen, 2000),
		transition("ledger", protocol.StateOpen, protocol.StateClosed, 2600))
	sleepTo(clk, at(3))

	next := startService(t, cfg)
	bubbletest.Settle()
	if n := len(rcv.received()); n < 2 {
		t.Fatalf("the next leader sent %d messages at its takeover, want both firings", n)
	}
	sleepTo(clk, at(20))
	bubbletest.Settle()
	if n := len(rcv.received()); n < 4 {
		t.Fatalf("the webhook got %d messages by 20 s, want both to resolve after the hold (4)", n)
	}
	if kept, err := st.FiringAlerts(ctx); err != nil || len(kept) != 0 {
		t.Fatalf("kept alert states %+v (%v), want the resolves acknowledged", kept, err)
	}
	next.stop()
	want := []string{
		"firing checkout/payments since 1s", "firing checkout/ledger since 2s",
		"resolved checkout/payments since 1s", "resolved checkout/ledger since 2s"}
	got := events(t, rcv)
	if !sameSet(got, want) {
		t.Fatalf("webhook calls %q, want %q", got, want)
	}

	cfg.Margin = time.Hour // replays everything again
	sleepTo(clk, at(40))
	startService(t, cfg)
	bubbletest.Settle()
	checkMark("the restart", at(40))
	// Past the hold: a wrongly kept alert would resolve at a tick until
	// then.
	sleepTo(clk, at(60))
	bubbletest.Settle()
	checkMark("the restart's tick at 60 s", at(60))
	if got := events(t, rcv); !sameSet(got, want) {
		t.Fatalf("after a replay, webhook calls %q, want still %q", got, want)
	}
	if kept, err := st.FiringAlerts(ctx); err != nil || len(kept) != 0 {
		t.Fatalf("kept alert states after the replay: %+v, %v; want none", kept, err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
