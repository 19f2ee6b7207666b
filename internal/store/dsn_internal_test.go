package store

import (
	"path/filepath"
	"testing"

	"github.com/cbdash/cbdash/internal/pgtest"
)

// testDSN returns a new, empty database for an internal test: the file
// name in t.TempDir(), or a schema of the test's own while the suite runs
// on PostgreSQL.
func testDSN(t testing.TB, name string) string {
	t.Helper()
	if pgtest.Active() {
		return pgtest.DSN(t)
	}
	return filepath.Join(t.TempDir(), name)
}
