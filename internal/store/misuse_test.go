package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMisuseIsSummedThroughTheRollUps(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	for i := range 3 {
		w := window("db", t0.Add(time.Duration(i)*time.Second), protocol.StateClosed, 3, 0)
		w.Counts.Misuse = int64(i + 1)
		mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{w}})
	}
	if err := s.Compact(ctx, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A late report of a second already rolled up is merged at every level.
	late := window("db", t0, protocol.StateClosed, 1, 0)
	late.Counts.Misuse = 4
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 4, Windows: []protocol.Window{late}})
	for _, res := range []cbdash.Resolution{cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour} {
		t.Run(string(res), func(t *testing.T) {
			pts, err := s.History(ctx, cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Hour), Resolution: res})
			if err != nil {
				t.Fatal(err)
			}
			var misuse int64
			for _, p := range pts {
				misuse += p.Counts.Misuse
			}
			if misuse != 10 {
				t.Fatalf("misuse over the hour = %d, want 10", misuse)
			}
		})
	}
}

// Ramp rejections (protocol Counts.RejectedRamp, issue 35) are stored and
// summed through the roll-ups like every other count.
func TestRampRejectionsAreSummedThroughTheRollUps(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	for i := range 3 {
		w := window("db", t0.Add(time.Duration(i)*time.Second), protocol.StateClosed, 3, 0)
		w.Counts.RejectedRamp = int64(i + 1)
		mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{w}})
	}
	if err := s.Compact(ctx, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	late := window("db", t0, protocol.StateClosed, 1, 0)
	late.Counts.RejectedRamp = 4
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 4, Windows: []protocol.Window{late}})
	for _, res := range []cbdash.Resolution{cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour} {
		t.Run(string(res), func(t *testing.T) {
			pts, err := s.History(ctx, cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Hour), Resolution: res})
			if err != nil {
				t.Fatal(err)
			}
			var ramp, rejected int64
			for _, p := range pts {
				ramp += p.Counts.RejectedRamp
				rejected += p.Counts.Rejected()
			}
			if ramp != 10 || rejected != 10 {
				t.Fatalf("ramp rejections over the hour = %d (rejections %d), want 10", ramp, rejected)
			}
		})
	}
}
