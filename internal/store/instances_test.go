package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestInstancesReturnsLastKnownStatePerBreaker(t *testing.T) {
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "db", "psp", "old"), t0); err != nil {
		t.Fatal(err)
	}
	// A new process no longer declares "old".
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 2, "db", "psp"), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	trAt := t0.Add(61 * time.Second)
	mustSave(t, s, "pay", "pay-1", 2, protocol.Batch{Seq: 1,
		Transitions: []protocol.Transition{{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: trAt.UnixMilli(),
			Cause: protocol.Cause{Kind: protocol.CauseFailureRate}}},
		Windows: []protocol.Window{window("psp", t0.Add(time.Minute), protocol.StateHalfOpen, 1, 0)}})
	got, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d instance breakers, want 2 (db, psp): %+v", len(got), got)
	}
	db, psp := got[0], got[1]
	// LastSeen is the latest of the hello (t0+1m) and the batch (received at t0).
	if db.Breaker != "db" || db.State != protocol.StateOpen || !db.LastTransition.Equal(trAt) ||
		db.Config.FailureRateThreshold != 50 || db.Labels["zone"] != "a" || !db.LastSeen.Equal(t0.Add(time.Minute)) {
		t.Errorf("db = %+v", db)
	}
	if psp.Breaker != "psp" || psp.State != protocol.StateHalfOpen || psp.Service != "pay" || psp.Instance != "pay-1" {
		t.Errorf("psp = %+v", psp)
	}
}
