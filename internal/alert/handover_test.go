package alert_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
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
// replays the same trips sends nothing more.
func TestTakeoverAlertsTripsStoredWhileNoLeaderRanOnce(t *testing.T) {
	ctx := context.Background()
	clk := breakertest.NewClock(t0)
	st := storetest.Open(t, clk)
	rcv := newReceiver(t)
	if _, err := st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "checkout open", Service: "checkout",
		Kind: cbdash.AlertOpen, Hold: 10 * time.Second, WebhookURL: rcv.URL}); err != nil {
		t.Fatal(err)
	}
	ledger := cbdash.DependencyKey{Service: "checkout", Breaker: "ledger"}
	feed := &liveFeed{}
	feed.set(dep(payments, "a:closed", "b:closed"), dep(ledger, "a:closed", "b:closed"))
	cfg := alert.Config{Source: feed, Store: st, Clock: clk, Interval: time.Second,
		Delivery: alert.DeliveryConfig{Backoff: time.Second, Attempts: 5, AllowPrivate: true}}
	marked := func() bool {
		m, _, _ := st.LeaderMark(ctx, alert.MarkName)
		return m.Equal(clk.Now())
	}

	first := startService(t, cfg)
	eventually.True(t, "the first leader to store its mark", marked)
	first.stop() // the leader is gone

	storeTransitions(t, st, "a", transition("payments", protocol.StateClosed, protocol.StateOpen, 1000),
		transition("payments", protocol.StateOpen, protocol.StateClosed, 1400))
	storeTransitions(t, st, "b", transition("ledger", protocol.StateClosed, protocol.StateOpen, 2000),
		transition("ledger", protocol.StateOpen, protocol.StateClosed, 2600))
	clk.Set(at(3))

	next := startService(t, cfg)
	eventually.True(t, "the next leader fires both", func() bool { return len(rcv.received()) >= 2 })
	sec := 3
	eventually.True(t, "both to resolve after the hold", func() bool {
		if sec < 20 {
			sec++
			clk.Set(at(sec))
		}
		return len(rcv.received()) >= 4
	})
	eventually.True(t, "the resolves to be acknowledged", func() bool {
		kept, err := st.FiringAlerts(ctx)
		return err == nil && len(kept) == 0
	})
	next.stop()
	want := []string{
		"firing checkout/payments since 1s", "firing checkout/ledger since 2s",
		"resolved checkout/payments since 1s", "resolved checkout/ledger since 2s"}
	got := events(t, rcv)
	if !sameSet(got, want) {
		t.Fatalf("webhook calls %q, want %q", got, want)
	}

	cfg.Margin = time.Hour // replays everything again
	clk.Set(at(40))
	startService(t, cfg)
	eventually.True(t, "the restart to store its mark", marked)
	clk.Set(at(60)) // past the hold: a wrongly kept alert would resolve at this tick, which stores the mark
	eventually.True(t, "the restart's tick", marked)
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
