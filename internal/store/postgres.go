package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	dsnpkg "github.com/cbdash/cbdash/internal/dsn"
)

// IsPostgres reports whether dsn names a PostgreSQL database rather than
// a SQLite file: a postgres:// or postgresql:// URL, or libpq's
// keyword/value form ("host=db1 user=cbdash password='a b' dbname=cbdash";
// see dsn.IsPostgres).
func IsPostgres(dsn string) bool { return dsnpkg.IsPostgres(dsn) }

// MaskDSN returns dsn fit for a log or an error message: a PostgreSQL
// URL's password (in the user part or a password= or sslpassword=
// parameter) and a keyword/value string's password= and sslpassword=
// values (quoted or not) replaced by "xxxxx". Anything else (a SQLite
// path) is returned as it is.
func MaskDSN(dsn string) string { return dsnpkg.Mask(dsn) }

// connectTimeout bounds each new connection when the DSN sets no
// connect_timeout, so that an unreachable server fails a write (and the
// ack) within seconds instead of hanging the writer.
const connectTimeout = 5 * time.Second

// openPostgres opens a PostgreSQL store through pgx's database/sql
// driver: one connection for the writer (the same single-writer group
// commit as SQLite's) and a pool of Options.ReadConns read-only
// connections (default_transaction_read_only). database/sql replaces a
// connection the server dropped, so when the server comes back the next
// write reconnects; meanwhile writes fail with a Transient error.
func openPostgres(ctx context.Context, dsn string, opts Options) (*Store, error) {
	masked := MaskDSN(dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: the PostgreSQL DSN %s does not parse: %w", masked, dsnpkg.MaskError(dsn, err))
	}
	if !strings.Contains(dsn, "connect_timeout") {
		cfg.ConnectTimeout = connectTimeout
	}
	// The connections are named for pg_stat_activity: "cbdash writer" and
	// "cbdash reader", after the DSN's application_name when it has one
	// ("<name> writer"), so that several collectors' can be told apart.
	name := "cbdash"
	if n := cfg.RuntimeParams["application_name"]; n != "" {
		name = n
	}
	wcfg := cfg.Copy()
	wcfg.RuntimeParams["application_name"] = name + " writer"
	wdb := stdlib.OpenDB(*wcfg)
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	if err := wdb.PingContext(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: cannot reach PostgreSQL at %s: %w", masked, dsnpkg.MaskError(dsn, err))
	}
	if err := migrate(ctx, wdb, postgresDialect, masked, opts.Logger); err != nil {
		wdb.Close()
		return nil, err
	}
	// The writer's id in the windows tables' rows: unique among the
	// processes sharing the schema (see doc.go, Several writers).
	var id int64
	if err := wdb.QueryRowContext(ctx, "SELECT nextval('store_writers')").Scan(&id); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: take a writer id on %s: %w", masked, dsnpkg.MaskError(dsn, err))
	}
	rcfg := cfg.Copy()
	rcfg.RuntimeParams["application_name"] = name + " reader"
	rcfg.RuntimeParams["default_transaction_read_only"] = "on"
	rdb := stdlib.OpenDB(*rcfg)
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	if err := rdb.PingContext(ctx); err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", masked, dsnpkg.MaskError(dsn, err))
	}
	return start(opts, postgresDialect, wdb, rdb, id), nil
}

// CheckDSN reports what can be told of dsn without connecting: a
// PostgreSQL URL or keyword/value string that does not parse (the error names it with its
// password masked). A SQLite path is checked by Open. Errors: a plain
// error saying what is wrong.
func CheckDSN(dsn string) error {
	if !IsPostgres(dsn) {
		return nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return fmt.Errorf("the PostgreSQL DSN %s does not parse: %w", MaskDSN(dsn), dsnpkg.MaskError(dsn, err))
	}
	return nil
}
