package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestLostSpansAreStoredOnceAsGapsOfTheirDependency(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	lost := &protocol.Dropped{Windows: 30, Calls: 120, Lost: []protocol.LostSpan{
		{Breaker: "db", Start: t0.Add(10 * time.Second).UnixMilli(), End: t0.Add(40 * time.Second).UnixMilli(), Calls: 100},
		{Breaker: "cache", Start: t0.Add(12 * time.Second).UnixMilli(), End: t0.Add(14 * time.Second).UnixMilli(), Calls: 20},
	}}
	b := protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", t0.Add(40*time.Second), protocol.StateClosed, 3, 0)}, Dropped: lost}
	mustSave(t, s, "pay", "pay-1", 1, b)
	if mustSave(t, s, "pay", "pay-1", 1, b) {
		t.Fatal("a duplicate batch was stored again")
	}
	ctx := context.Background()
	gaps, err := s.Gaps(ctx, cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := cbdash.Gap{Instance: "pay-1", From: t0.Add(10 * time.Second), To: t0.Add(40 * time.Second), Calls: 100}
	if len(gaps) != 1 || gaps[0] != want {
		t.Fatalf("gaps = %+v, want once %+v", gaps, want)
	}
	for name, q := range map[string]cbdash.HistoryQuery{
		"ending at its start":   {DependencyKey: dbKey, From: t0, To: t0.Add(10 * time.Second)},
		"starting at its end":   {DependencyKey: dbKey, From: t0.Add(40 * time.Second), To: t0.Add(time.Minute)},
		"of another dependency": {DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "queue"}, From: t0, To: t0.Add(time.Hour)},
		"of an unknown service": {DependencyKey: cbdash.DependencyKey{Service: "ship", Breaker: "db"}, From: t0, To: t0.Add(time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			gaps, err := s.Gaps(ctx, q)
			if err != nil || gaps == nil || len(gaps) != 0 {
				t.Fatalf("gaps = %+v, %v; want an empty list", gaps, err)
			}
		})
	}
	if _, err := s.Gaps(ctx, cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0}); !errors.Is(err, cbdash.ErrInvalid) {
		t.Fatalf("an empty range: err = %v, want ErrInvalid", err)
	}
}

func TestGapsExpireWithTheHourBuckets(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{Retention: store.Retention{Seconds: time.Hour, Minutes: 3 * time.Hour, Hours: 48 * time.Hour}})
	lost := &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: "db", Start: t0.UnixMilli(), End: t0.Add(time.Second).UnixMilli(), Calls: 1}}}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Dropped: lost})
	ctx := context.Background()
	q := cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Hour)}
	if err := s.Compact(ctx, t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if gaps, _ := s.Gaps(ctx, q); len(gaps) != 1 {
		t.Fatalf("after a day: gaps = %+v, want the gap kept", gaps)
	}
	if err := s.Compact(ctx, t0.Add(49*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if gaps, _ := s.Gaps(ctx, q); len(gaps) != 0 {
		t.Fatalf("past the hours' retention: gaps = %+v, want none", gaps)
	}
}
