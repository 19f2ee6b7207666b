package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestInstancesReturnsLastKnownStatePerBreaker(t *testing.T) {
	t.Parallel()
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

// A batch writes its instance's last-seen time at most every 5 s (the
// stale timeout is 15 s): batches a second apart leave it at the first
// until 5 s have passed, then move it; a hello always writes it, and a
// reopened store (an empty cache) writes it at the next batch.
func TestLastSeenIsWrittenEveryFiveSeconds(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, store.Options{})
	ctx := context.Background()
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "db"), t0); err != nil {
		t.Fatal(err)
	}
	lastSeen := func(s *store.Store) time.Time {
		t.Helper()
		got, err := s.Instances(ctx)
		if err != nil || len(got) != 1 {
			t.Fatalf("instances = %v, %v", got, err)
		}
		return got[0].LastSeen
	}
	save := func(s *store.Store, seq uint64, at time.Time) {
		t.Helper()
		b := protocol.Batch{Seq: seq, Windows: []protocol.Window{window("db", at.Add(-time.Second), protocol.StateClosed, 1, 0)}}
		if _, err := s.SaveBatch(ctx, "pay", "pay-1", 1, b, at); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 4; i++ { // the first batch writes it; the next four not
		save(s, uint64(i), t0.Add(time.Duration(i)*time.Second))
	}
	if got, want := lastSeen(s), t0.Add(time.Second); !got.Equal(want) {
		t.Fatalf("after batches at 1-4 s: last seen %v, want %v (the first batch)", got.Sub(t0), want.Sub(t0))
	}
	save(s, 5, t0.Add(5*time.Second))
	if got := lastSeen(s); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("at 5 s (4 s after the write): last seen %v", got.Sub(t0))
	}
	save(s, 6, t0.Add(6*time.Second))
	if got, want := lastSeen(s), t0.Add(6*time.Second); !got.Equal(want) {
		t.Fatalf("at 6 s (5 s after the write): last seen %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "db"), t0.Add(7*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, want := lastSeen(s), t0.Add(7*time.Second); !got.Equal(want) {
		t.Fatalf("after a hello at 7 s: last seen %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := storetest.OpenFile(t, path, store.Options{})
	save(s2, 7, t0.Add(8*time.Second))
	if got, want := lastSeen(s2), t0.Add(8*time.Second); !got.Equal(want) {
		t.Fatalf("first batch after a restart: last seen %v, want %v", got.Sub(t0), want.Sub(t0))
	}
}
