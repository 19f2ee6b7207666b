package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/cbdash/cbdash"
)

// dialect is everything that differs between the two backends once a
// connection is open: the few spellings of SQL that differ, which
// migrations apply and how a driver error is classified. The store's SQL
// is written once with $1, $2... placeholders, which both drivers bind
// positionally (modernc.org/sqlite takes $N for the N-th argument, as
// PostgreSQL does, and a number may be used twice), so a query is the
// same text on both backends except where it needs one of the spellings
// below (greatest, least, jsonEach, lowerHex).
type dialect struct {
	postgres bool
}

var (
	sqliteDialect   = &dialect{}
	postgresDialect = &dialect{postgres: true}
)

func (d *dialect) name() string {
	if d.postgres {
		return "postgres"
	}
	return "sqlite"
}

// goose is the migrations' dialect; the migrations live in
// migrations/<name>, with the same version numbers in both folders.
func (d *dialect) goose() goose.Dialect {
	if d.postgres {
		return goose.DialectPostgres
	}
	return goose.DialectSQLite3
}

// greatest spells the larger of the SQL expressions a and b: SQLite's
// two-argument scalar max(a, b), PostgreSQL's GREATEST(a, b) (max with
// two arguments is no function there). Both are for non-NULL values
// here: SQLite's is NULL when either is, PostgreSQL's ignores a NULL.
func (d *dialect) greatest(a, b string) string {
	if d.postgres {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "max(" + a + ", " + b + ")"
}

// least spells the smaller of a and b, as greatest the larger.
func (d *dialect) least(a, b string) string {
	if d.postgres {
		return "LEAST(" + a + ", " + b + ")"
	}
	return "min(" + a + ", " + b + ")"
}

// jsonEach spells a table of the elements of the JSON array of strings
// that the placeholder param is bound to (jsonStrings), one row each in
// a text column named value: SQLite's json_each, PostgreSQL's
// jsonb_array_elements_text. For "x IN (SELECT value FROM " +
// d.jsonEach("$1") + ")" with any number of values.
func (d *dialect) jsonEach(param string) string {
	if d.postgres {
		return "jsonb_array_elements_text(CAST(" + param + " AS jsonb))"
	}
	return "json_each(" + param + ")"
}

// lowerHex spells the lower-case hex digits of the blob expression b:
// SQLite's lower(hex(b)), PostgreSQL's encode(b, 'hex').
func (d *dialect) lowerHex(b string) string {
	if d.postgres {
		return "encode(" + b + ", 'hex')"
	}
	return "lower(hex(" + b + "))"
}

// params collects the arguments of a query built at run time and spells
// their placeholders: add appends v and returns "$n", n its position.
type params []any

func (p *params) add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

// args converts arguments the backends would type differently: a Go bool
// is stored as the integer 0 or 1 on both (SQLite's habit; PostgreSQL
// refuses a bool for a BIGINT parameter).
func (d *dialect) args(args []any) []any {
	copied := false
	for i, a := range args {
		b, ok := a.(bool)
		if !ok {
			continue
		}
		if !copied { // the caller's slice is not ours to change
			args, copied = append([]any(nil), args...), true
		}
		args[i] = int64(0)
		if b {
			args[i] = int64(1)
		}
	}
	return args
}

// beginGroup runs at the start of each group transaction. On PostgreSQL,
// where several cbdash processes may share one schema, it takes the
// schema's transaction-level advisory lock: in shared mode for a group of
// batches (x.shared), which runs beside the other processes' batch
// groups, exclusively for any other group, which runs alone (see doc.go,
// Several writers). It forgets the roll-up watermarks, which another
// process's Compact may have moved since the last group (they are read
// again, under the lock, when the group needs them), and reads the
// transaction's id. SQLite has one writer per file: nothing to do.
func (d *dialect) beginGroup(x *wtx) error {
	if !d.postgres {
		return nil
	}
	x.w.c.wm = nil
	// The lock, and the transaction's id (to ask the server whether it
	// committed when the answer to COMMIT is lost:
	// writer.committedAfterAll), in one round trip.
	q, err := x.queryRow(lockSQL[x.shared])
	if err != nil {
		return err
	}
	return q.Scan(&x.txid)
}

// lockSQL takes the schema's advisory lock, exclusive or shared (true),
// and returns the transaction's id.
var lockSQL = map[bool]string{
	false: "SELECT txid_current() FROM (SELECT pg_advisory_xact_lock(hashtext(current_schema()))) AS l",
	true:  "SELECT txid_current() FROM (SELECT pg_advisory_xact_lock_shared(hashtext(current_schema()))) AS l",
}

// retryable reports whether err is PostgreSQL's deadlock (40P01) or
// serialization failure (40001): the transaction was chosen to end so
// that another may go on, and the same writes pass when run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// translate maps a PostgreSQL unique violation, which the single writer
// meets only when another process wrote the same key, to
// cbdash.ErrConflict; other errors are returned as they are.
func (d *dialect) translate(err error) error {
	var pe *pgconn.PgError
	if d.postgres && errors.As(err, &pe) && pe.Code == "23505" {
		return fmt.Errorf("%w: %w", cbdash.ErrConflict, err)
	}
	return err
}

// transientPostgres classifies a PostgreSQL error for Transient: the
// server unreachable or restarting, out of disk or memory, a read-only
// server (a standby), a serialization failure or deadlock (the same write
// will pass when retried) are transient; a constraint or a statement the
// schema does not fit is not.
func transientPostgres(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // the connection's trouble (refused, reset, EOF), not the database's word
	}
	switch {
	case strings.HasPrefix(pe.Code, "08"), // connection exception
		strings.HasPrefix(pe.Code, "53"),       // insufficient resources: disk full, out of memory, too many connections
		strings.HasPrefix(pe.Code, "57"),       // operator intervention: shutdown, cannot connect now
		strings.HasPrefix(pe.Code, "58"),       // system error (I/O)
		pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock
		pe.Code == "55P03",                     // lock not available
		pe.Code == "25006",                     // read-only transaction (a standby)
		pe.Code == "XX001", pe.Code == "XX002": // data or index corrupted
		return true
	}
	return false
}

// readDB is the read pool with the dialect's argument conversion (args)
// applied to every query.
type readDB struct {
	db *sql.DB
	d  *dialect
}

func (r *readDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.db.QueryContext(ctx, query, r.d.args(args)...)
}

func (r *readDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.db.QueryRowContext(ctx, query, r.d.args(args)...)
}

// snapshot begins a read-only transaction whose statements all see the
// same snapshot (SQLite's read transactions always do; PostgreSQL's need
// REPEATABLE READ).
func (r *readDB) snapshot(ctx context.Context) (*readTx, error) {
	var opts *sql.TxOptions
	if r.d.postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := r.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &readTx{tx: tx, d: r.d}, nil
}

// readTx is a read transaction with the dialect's argument conversion
// (args) applied to every query.
type readTx struct {
	tx *sql.Tx
	d  *dialect
}

func (t *readTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, t.d.args(args)...)
}

func (t *readTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, t.d.args(args)...)
}

func (t *readTx) Rollback() error { return t.tx.Rollback() }

func isPgError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
