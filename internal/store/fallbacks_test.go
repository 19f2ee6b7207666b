package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// FallbackFreshness says, per declared breaker, when it was first known
// and when its fallbacks last served rejected calls: the end of the
// second that did, and after compaction (the seconds rolled up and
// expired) the end of its minute, still kept; a breaker whose fallbacks
// never served has none, nor does one whose fallbacks ran without a
// rejection.
func TestFallbackFreshnessSurvivesCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, store.Options{})
	served := window("pricing", t0.Add(30*time.Second), protocol.StateForcedOpen, 0, 0)
	served.Counts = protocol.Counts{RejectedForced: 8, FallbackSuccess: 6, FallbackFailure: 2}
	noReject := window("search", t0.Add(40*time.Second), protocol.StateClosed, 5, 0)
	noReject.Counts.FallbackSuccess = 5 // a fallback after a failure, not a rejection
	if err := s.SaveHello(ctx, hello("checkout", "checkout-1", 1, "payments", "pricing", "search"), t0); err != nil {
		t.Fatal(err)
	}
	mustSave(t, s, "checkout", "checkout-1", 1, protocol.Batch{Seq: 1,
		Windows: []protocol.Window{window("payments", t0, protocol.StateClosed, 10, 0), served, noReject}})
	check := func(when string, wantPricing time.Time) {
		t.Helper()
		fs, err := s.FallbackFreshness(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 3 {
			t.Fatalf("%s: %+v, want the three breakers", when, fs)
		}
		want := []cbdash.FallbackFreshness{
			{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}, KnownSince: t0},
			{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "pricing"}, KnownSince: t0, LastServed: wantPricing},
			{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "search"}, KnownSince: t0},
		}
		for i := range want {
			if fs[i].DependencyKey != want[i].DependencyKey || !fs[i].KnownSince.Equal(want[i].KnownSince) || !fs[i].LastServed.Equal(want[i].LastServed) {
				t.Errorf("%s: %+v, want %+v", when, fs[i], want[i])
			}
		}
	}
	check("as reported", t0.Add(31*time.Second))
	if err := s.Compact(ctx, t0.Add(72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("compacted", t0.Add(time.Minute))
}
