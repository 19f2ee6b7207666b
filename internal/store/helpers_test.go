package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// t0 is a fixed, minute- and hour-aligned test time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openStore(tb testing.TB, opts store.Options) (*store.Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "cbdash.db")
	s, err := store.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, path
}

func hello(service, instance string, startedAt int64, breakers ...string) protocol.Hello {
	h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: service,
		Instance: instance, SDKVersion: "test", StartedAt: startedAt, Labels: map[string]string{"zone": "a"}}
	for _, b := range breakers {
		h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: b, WindowKind: "count", WindowSize: 100,
			FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 3})
	}
	return h
}

// window returns a one-second report with n successes and f errors.
func window(breaker string, start time.Time, state string, n, f int64) protocol.Window {
	lat := make([]int64, protocol.NumLatencyBuckets)
	lat[2] = n
	lat[5] = f
	return protocol.Window{Breaker: breaker, Start: start.UnixMilli(), Millis: 1000, State: state,
		Counts:   protocol.Counts{Admitted: n + f, Successes: n, Failures: f, Errors: f},
		InFlight: 1, Latency: lat, LatencySumMs: float64(n*3 + f*40)}
}

func mustSave(tb testing.TB, s *store.Store, service, instance string, startedAt int64, b protocol.Batch) bool {
	tb.Helper()
	stored, err := s.SaveBatch(context.Background(), service, instance, startedAt, b, t0)
	if err != nil {
		tb.Fatalf("SaveBatch seq %d: %v", b.Seq, err)
	}
	return stored
}

// rawDB opens the store's file directly, as another process would.
func rawDB(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
