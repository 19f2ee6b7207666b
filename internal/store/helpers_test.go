package store_test

import (
	"context"
	"database/sql"
	"runtime"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for rawDB

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// t0 is noon UTC of the test epoch's day: minute-, hour- and
// day-aligned, whatever CBDASH_TEST_EPOCH says.
var t0 = clocktest.Noon()

// openStore opens a new store in tb.TempDir() and returns it with its path.
func openStore(tb testing.TB, opts store.Options) (*store.Store, string) {
	tb.Helper()
	path := storetest.Path(tb)
	return storetest.OpenFile(tb, path, opts), path
}

// clockAt returns a virtual clock standing at t.
func clockAt(t time.Time) *breakertest.Clock { return breakertest.NewClock(t) }

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

// rawDB opens the store's database directly, as another process would
// (the SQLite file, or the PostgreSQL DSN with its schema).
func rawDB(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	driver, dsn := "sqlite", path+"?_pragma=busy_timeout(5000)"
	if store.IsPostgres(path) {
		driver, dsn = "pgx", path
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// sqliteOnly skips a test of what only SQLite has (a file, its WAL, its
// writer in this process) while the suite runs on PostgreSQL.
func sqliteOnly(tb testing.TB, why string) {
	tb.Helper()
	pgtest.SkipUnlessSQLite(tb, why)
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
