package store_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestNoStoredRowBreaksHistory stores rows no validated batch can make
// (a latency sum of +Inf, counts at int64's limit, as a store written
// before validation bounded them may hold) and checks that History still
// answers JSON-encodable points and that later reports saturate instead of
// wrapping to negative counts.
func TestNoStoredRowBreaksHistory(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, store.Options{})
	ctx := context.Background()
	start := clocktest.Epoch().Truncate(time.Hour)
	if err := s.SaveHello(ctx, hello("api", "i1", 1, "db"), start); err != nil {
		t.Fatal(err)
	}
	mustSave(t, s, "api", "i1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", start, protocol.StateClosed, 5, 0)}})
	db := rawDB(t, path)
	inf := "9e999" // SQLite reads an overflowing literal as +Inf; PostgreSQL refuses it
	if store.IsPostgres(path) {
		inf = "'Infinity'"
	}
	if _, err := db.Exec(`UPDATE windows_second SET latency_sum = ` + inf + `, admitted = 9223372036854775807, successes = 9223372036854775807`); err != nil {
		t.Fatal(err)
	}
	// The store opened again (its caches empty, as in a process that
	// opens such a file), more of the same second: the sums saturate.
	s.Close()
	s = storetest.OpenFile(t, path, store.Options{})
	mustSave(t, s, "api", "i1", 1, protocol.Batch{Seq: 2, Windows: []protocol.Window{window("db", start, protocol.StateClosed, 5, 0)}})
	for _, res := range []cbdash.Resolution{cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour} {
		pts, err := s.History(ctx, cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
			From: start.Add(-time.Hour), To: start.Add(time.Hour), Resolution: res})
		if err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		if len(pts) != 1 {
			t.Fatalf("%s: %d points, want 1", res, len(pts))
		}
		if _, err := json.Marshal(pts); err != nil {
			t.Fatalf("%s: points do not encode: %v", res, err)
		}
		p := pts[0]
		if p.Counts.Admitted != math.MaxInt64 || p.Counts.Successes != math.MaxInt64 {
			t.Fatalf("%s: admitted %d successes %d, want saturated at math.MaxInt64", res, p.Counts.Admitted, p.Counts.Successes)
		}
		if math.IsInf(p.LatencySumMs, 0) || math.IsNaN(p.LatencySumMs) {
			t.Fatalf("%s: latency sum %v", res, p.LatencySumMs)
		}
	}
}
