package storetest_test

import (
	"os"
	"testing"

	"github.com/cbdash/cbdash/internal/pgtest"
)

// TestMain runs the tests on SQLite and, when CBDASH_TEST_POSTGRES names a
// server, again on PostgreSQL.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, nil)) }
