// Package pgtest runs store tests on PostgreSQL as well as on SQLite: it
// gives each test a fresh schema of its own in the database that the
// environment variable CBDASH_TEST_POSTGRES names, dropped when the test
// ends, and runs a package's whole suite a second time on PostgreSQL
// (Main). It does not import the store, so the store's own internal tests
// can use it.
//
// Which backend the running suite uses is process-wide test state, set by
// Main between the two runs (or by CBDASH_TEST_STORE=postgres for
// packages whose TestMain does not call Main): tests read it through
// Active and never change it.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// EnvDSN names the environment variable holding the PostgreSQL server
// the tests may use, as a postgres:// URL whose role may CREATE SCHEMA.
const EnvDSN = "CBDASH_TEST_POSTGRES"

// EnvStore, set to "postgres", makes every store a test opens through
// storetest a PostgreSQL one (for a one-off run of the packages above
// the store; the store's own suite runs on both backends by itself).
const EnvStore = "CBDASH_TEST_STORE"

var active atomic.Bool

// Active reports whether the tests now running use PostgreSQL.
func Active() bool { return active.Load() || os.Getenv(EnvStore) == "postgres" }

// Main runs m's tests on SQLite and then, when CBDASH_TEST_POSTGRES is
// set, again on PostgreSQL, and returns the exit code for os.Exit.
// check, if not nil, runs after both (a goroutine-leak check). Without
// the variable the PostgreSQL run is skipped with a message; with it but
// no server answering, the run fails in CI (CI set, as CI=true) and is
// skipped with a message otherwise.
func Main(m *testing.M, check func() error) int {
	code := run(m, "SQLite")
	dsn := os.Getenv(EnvDSN)
	if dsn != "" {
		if err := ping(dsn); err != nil {
			if os.Getenv("CI") != "" {
				fmt.Fprintf(os.Stderr, "pgtest: FAIL: %s=%s but PostgreSQL does not answer: %v\n", EnvDSN, mask(dsn), err)
				return 1
			}
			fmt.Printf("pgtest: the PostgreSQL run is skipped: %s=%s does not answer: %v\n", EnvDSN, mask(dsn), err)
			dsn = ""
		}
	} else {
		fmt.Printf("pgtest: the PostgreSQL run is skipped: %s is not set (see README, Tests on PostgreSQL)\n", EnvDSN)
	}
	if dsn != "" {
		active.Store(true)
		if c := run(m, "PostgreSQL ("+mask(dsn)+")"); c != 0 {
			code = c
		}
		active.Store(false)
	}
	if check != nil {
		if err := check(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			code = 1
		}
	}
	return code
}

func run(m *testing.M, backend string) int {
	if backend != "SQLite" {
		fmt.Printf("pgtest: the suite again, on %s\n", backend)
	}
	c := m.Run()
	if c != 0 {
		fmt.Printf("pgtest: FAIL on %s\n", backend)
	}
	return c
}

func ping(dsn string) error {
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// DSN creates a new schema for tb in the CBDASH_TEST_POSTGRES database
// and returns a DSN whose connections use it (search_path), so the
// store's tables and its goose version table are the test's own. The
// schema is dropped when the test ends, after the cleanups registered
// later (closing the stores). It fails tb when the variable is not set
// or the schema cannot be created.
func DSN(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(EnvDSN)
	if base == "" {
		tb.Fatalf("pgtest: %s is not set", EnvDSN)
	}
	name := strings.Trim(unsafe.ReplaceAllString(strings.ToLower(tb.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	schema := fmt.Sprintf("t_%s_%08x", name, rand.Uint32())
	db, err := open(base)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", mask(base), err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		tb.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		db, err := open(base)
		if err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", mask(base), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// SkipUnlessSQLite skips tb when the suite runs on PostgreSQL, saying
// why the test is SQLite's alone.
func SkipUnlessSQLite(tb testing.TB, why string) {
	tb.Helper()
	if Active() {
		tb.Skipf("SQLite only: %s", why)
	}
}

func mask(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(a DSN that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
