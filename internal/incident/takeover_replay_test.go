package incident_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestTakeoverReplaysMoreThanTenThousandTransitions: while no leader
// runs, the store receives 10,000 transitions of a flapping dependency
// (payments), then a short trip of another one (ledger). The next leader
// must give ledger its incident: the replay reads every transition
// received after the mark, not the first 10,000 by the agents' time
// (Store.TransitionsReceivedSince's limit), after which the mark moves on
// and the trip is never replayed again.
func TestTakeoverReplaysMoreThanTenThousandTransitions(t *testing.T) {
	st := openStore(t)
	clk := breakertest.NewClock(t0)
	newAgentLog(t, st, "checkout", []string{"payments", "ledger"}, "a")
	ctx := context.Background()

	_, stop := runService(t, st, &feed{ch: make(chan cbdash.Event)}, clk, 0)
	eventually.True(t, "the first leader to store its mark", func() bool {
		_, ok, _ := st.LeaderMark(ctx, incident.MarkName)
		return ok
	})
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
	clk.Advance(10 * time.Minute)

	_, stop = runService(t, st, &feed{ch: make(chan cbdash.Event)}, clk, 0)
	eventually.True(t, "the next leader to take over (store its mark)", func() bool {
		m, _, _ := st.LeaderMark(ctx, incident.MarkName)
		return m.Equal(clk.Now())
	})
	stop()
	l, err := st.Incidents(ctx, cbdash.IncidentQuery{Service: "checkout", Breaker: "ledger", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 1 {
		t.Fatalf("ledger has %d incidents after the takeover, want 1 (its trip was stored while no leader ran): %+v", len(l), l)
	}
}
