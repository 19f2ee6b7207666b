package store_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/pgtest"
)

// TestMain runs the suite on SQLite and, when CBDASH_TEST_POSTGRES names a
// server, again on PostgreSQL (pgtest.Main), and fails the package when a
// test leaves a goroutine behind (the writer must stop on Close).
func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, func() error { return goleak.Find() }))
}
