package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/cbdash/cbdash"
)

// dialect is everything that differs between the two backends once a
// connection is open: how a query is spelled, which migrations apply and
// how a driver error is classified. The store's SQL is written once, in
// SQLite's spelling with "?" placeholders; the PostgreSQL dialect
// rewrites the few constructs that differ (see rebind), once per query
// text.
type dialect struct {
	postgres bool
	cache    sync.Map // query text -> rewritten text (PostgreSQL only)
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

// q returns query as the backend spells it. For PostgreSQL: "?" becomes
// "$1", "$2"... (outside string literals); json_each(?) becomes
// jsonb_array_elements_text (both yield a column named value); the
// two-argument scalar max(a, b) and min(a, b) become GREATEST and LEAST
// (max and min with one argument stay aggregates); hex(x) becomes
// upper(encode(x, 'hex')). Everything else is SQL both accept: ON
// CONFLICT upserts, RETURNING, SAVEPOINT.
func (d *dialect) q(query string) string {
	if !d.postgres {
		return query
	}
	if v, ok := d.cache.Load(query); ok {
		return v.(string)
	}
	out := rebind(rewriteCalls(query))
	d.cache.Store(query, out)
	return out
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

// rebind numbers the "?" placeholders outside quoted text.
func rebind(query string) string {
	var b strings.Builder
	n := 0
	quote := byte(0)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// rewriteCalls rewrites the function calls PostgreSQL spells differently.
func rewriteCalls(query string) string {
	var b strings.Builder
	for i := 0; i < len(query); {
		name, ok := callAt(query, i)
		if !ok {
			b.WriteByte(query[i])
			i++
			continue
		}
		open := i + len(name)
		end := closingParen(query, open)
		if end < 0 {
			b.WriteByte(query[i])
			i++
			continue
		}
		inner := rewriteCalls(query[open+1 : end])
		switch lower := strings.ToLower(name); {
		case lower == "json_each":
			b.WriteString("jsonb_array_elements_text(CAST(" + inner + " AS jsonb))")
		case lower == "hex":
			b.WriteString("upper(encode(" + inner + ", 'hex'))")
		case (lower == "max" || lower == "min") && topLevelComma(inner):
			fn := "GREATEST"
			if lower == "min" {
				fn = "LEAST"
			}
			b.WriteString(fn + "(" + inner + ")")
		default:
			b.WriteString(query[i:open] + "(" + inner + ")")
		}
		i = end + 1
	}
	return b.String()
}

// callAt reports the name of a rewritten function called at query[i:]:
// a whole word directly followed by "(".
func callAt(query string, i int) (string, bool) {
	if i > 0 && isWord(query[i-1]) {
		return "", false
	}
	for _, name := range []string{"json_each", "hex", "max", "min"} {
		n := len(name)
		if i+n < len(query) && strings.EqualFold(query[i:i+n], name) && query[i+n] == '(' {
			return query[i : i+n], true
		}
	}
	return "", false
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// closingParen returns the index of the parenthesis closing the one at
// open, or -1.
func closingParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func topLevelComma(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				return true
			}
		}
	}
	return false
}

// beginGroup runs at the start of each group transaction. On PostgreSQL,
// where several cbdash processes may share one database, it takes a
// transaction-level advisory lock named after the schema, so the group
// transactions of all writers on that schema take turns (their
// read-modify-write of history rows and their seq checks cannot
// interleave), and it forgets the roll-up watermarks, which another
// process's Compact may have moved. SQLite has one writer per file.
func (d *dialect) beginGroup(x *wtx) error {
	if !d.postgres {
		return nil
	}
	x.w.c.wm = nil
	// Another collector may have stored batches of an agent process that
	// failed over: the last seqs are read again (dedup must see them).
	clear(x.w.c.seqs)
	// And it may have written the seconds the row cache holds.
	clear(x.w.c.rows)
	if _, err := x.exec("SELECT pg_advisory_xact_lock(hashtext(current_schema()))"); err != nil {
		return err
	}
	// The transaction's id, to ask the server whether it committed when
	// the answer to COMMIT is lost (writer.committedAfterAll).
	q, err := x.queryRow("SELECT txid_current()")
	if err != nil {
		return err
	}
	return q.Scan(&x.txid)
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

// readDB is the read pool with the dialect applied to every query.
type readDB struct {
	db *sql.DB
	d  *dialect
}

func (r *readDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.db.QueryContext(ctx, r.d.q(query), r.d.args(args)...)
}

func (r *readDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.db.QueryRowContext(ctx, r.d.q(query), r.d.args(args)...)
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

// readTx is a read transaction with the dialect applied to every query.
type readTx struct {
	tx *sql.Tx
	d  *dialect
}

func (t *readTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, t.d.q(query), t.d.args(args)...)
}

func (t *readTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, t.d.q(query), t.d.args(args)...)
}

func (t *readTx) Rollback() error { return t.tx.Rollback() }

func isPgError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
