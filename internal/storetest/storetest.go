// Package storetest opens real stores for tests: a SQLite file in the
// test's temporary directory, or, while the suite runs on PostgreSQL (see
// internal/pgtest), a schema of the test's own, on the clock the test
// gives, closed when the test ends. It is what tests use instead of a
// fake store.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/store"
)

// Open opens a new store in tb.TempDir() whose bookkeeping times (users,
// tokens, sessions, alert rules) read clk. It is closed at the end of the
// test, and a close error fails it. It fails tb if the store cannot open.
func Open(tb testing.TB, clk clock.Clock) *store.Store {
	tb.Helper()
	return OpenFile(tb, Path(tb), store.Options{Clock: clk})
}

// Path returns the DSN of a new, empty database for a test that opens the
// same database more than once: a not yet existing file in tb.TempDir(),
// or on PostgreSQL a new schema (pgtest.DSN), dropped when the test ends.
func Path(tb testing.TB) string {
	tb.Helper()
	if pgtest.Active() {
		return pgtest.DSN(tb)
	}
	return filepath.Join(tb.TempDir(), "cbdash.db")
}

// OpenFile opens (creating if needed) the store at path with opts, as
// Open does. Closing it earlier is allowed: Store.Close is idempotent.
func OpenFile(tb testing.TB, path string, opts store.Options) *store.Store {
	tb.Helper()
	st, err := store.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("storetest: open %s: %v", store.MaskDSN(path), err)
	}
	tb.Cleanup(func() {
		if err := st.Close(); err != nil {
			tb.Errorf("storetest: close %s: %v", store.MaskDSN(path), err)
		}
	})
	return st
}

// Postgres returns the DSN of a new schema of the test's own in the
// CBDASH_TEST_POSTGRES database (pgtest.DSN), migrated by the store: for
// a test that opens the collectors' bus (internal/cluster, whose tables
// are the store's) before any store. It fails tb when the variable is not
// set or the migration fails.
func Postgres(tb testing.TB) string {
	tb.Helper()
	dsn := pgtest.DSN(tb)
	if err := store.Migrate(context.Background(), dsn, nil); err != nil {
		tb.Fatalf("storetest: migrate %s: %v", store.MaskDSN(dsn), err)
	}
	return dsn
}
