package incident_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestTakeoverReplaysMoreThanTenThousandTransitions: while no leader
// runs, the store receives 10,000 transitions of a flapping dependency
// (payments), then a short trip of another one (ledger). The next leader
// must give ledger its incident: the replay reads every transition
// received after the mark, not the first 10,000 by the agents' time
// (Store.TransitionsReceivedSince's limit), after which the mark moves on
// and the trip is never replayed again. It runs in a synctest bubble: the
// 10 minutes without a leader are slept.
func TestTakeoverReplaysMoreThanTenThousandTransitions(t *testing.T) {
	synctest.Test(t, testTakeoverReplaysMoreThanTenThousandTransitions)
}

func testTakeoverReplaysMoreThanTenThousandTransitions(t *testing.T) {
	st := openStore(t)
	clk := clocktest.NewRunning()
	newAgentLog(t, st, "checkout", []string{"payments", "ledger"}, "a")
	ctx := context.Background()

	_, stop := runService(t, st, &feed{ch: make(chan cbdash.Event)}, clk, 0)
	bubbletest.Settle()
	if _, ok, err := st.LeaderMark(ctx, incident.MarkName); err != nil || !ok {
		t.Fatalf("the first leader stored no mark (%v)", err)
	}
	stop() // the leader is gone

	started := t0.Add(-time.Hour).UnixMilli()
	seq := uint64(0)
	at := t0.Add(time.Second).UnixMilli()
	for range 10 { // 10 batches of 1,000 transitions: 5,000 flaps
		var trs []protocol.Transition
		for i := range 1000 {
			from, to := protocol.StateClosed, protocol.StateOpen
			if i%2 == 1 {
				from, to = to, from
			}
			trs = append(trs, protocol.Transition{Breaker: "payments", From: from, To: to, At: at,
				Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}})
			at++
		}
		seq++
		b := protocol.Batch{Type: protocol.TypeBatch, Seq: seq, SentAt: at, Transitions: trs}
		if _, err := st.SaveBatch(ctx, "checkout", "a", started, b, time.UnixMilli(at)); err != nil {
			t.Fatal(err)
		}
	}
	seq++
	at += 1000
	ledger := protocol.Batch{Type: protocol.TypeBatch, Seq: seq, SentAt: at + 500, Transitions: []protocol.Transition{
		{Breaker: "ledger", From: protocol.StateClosed, To: protocol.StateOpen, At: at,
			Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}},
		{Breaker: "ledger", From: protocol.StateOpen, To: protocol.StateClosed, At: at + 500,
			Cause: protocol.Cause{Kind: protocol.CauseProbesSucceeded}},
	}}
	if _, err := st.SaveBatch(ctx, "checkout", "a", started, ledger, time.UnixMilli(at+500)); err != nil {
		t.Fatal(err)
	}
	bubbletest.Advance(10 * time.Minute)

	start := clk.Now()
	_, stop = runService(t, st, &feed{ch: make(chan cbdash.Event)}, clk, 0)
	bubbletest.Settle()
	if m, _, err := st.LeaderMark(ctx, incident.MarkName); err != nil || !m.Equal(start) {
		t.Fatalf("the next leader stored the mark %v (%v), want its start %v (a takeover)", m, err, start)
	}
	stop()
	l, err := st.Incidents(ctx, cbdash.IncidentQuery{Service: "checkout", Breaker: "ledger", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 1 {
		t.Fatalf("ledger has %d incidents after the takeover, want 1 (its trip was stored while no leader ran): %+v", len(l), l)
	}
}
