package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cbdash/cbdash/internal/clock"
	dsnpkg "github.com/cbdash/cbdash/internal/dsn"
)

// ErrClosed is returned by writes after Close has been called.
var ErrClosed = errors.New("store: closed")

// ErrSkipped is the outcome of a Stream's batch that was not tried: its
// stream was stopped after a failure (Stream.Stop), or the store closed
// while the batch waited for the answer to one (see Stream).
var ErrSkipped = errors.New("store: skipped")

// ErrNewerSchema is wrapped by Open's error for a database whose schema is
// newer than this build's migrations.
var ErrNewerSchema = errors.New("newer schema")

// checkPath explains the usual reasons a database file cannot be opened
// for writing before SQLite reports them all as "unable to open database
// file": a directory, a missing folder, a read-only file system, no
// permission. Paths SQLite treats specially (":memory:", "file:" URIs)
// are left to it.
func checkPath(path string) error {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil
	}
	if err := checkPlace(path); err != nil {
		return err
	}
	return checkWritable(path)
}

// checkPlace explains a path that is a directory, or whose folder is
// missing or not a folder.
func checkPlace(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("store: %s is a directory, not a database file (give a file path, such as %s)", path, filepath.Join(path, "cbdash.db"))
	case err != nil && errors.Is(err, fs.ErrNotExist):
		dst, derr := os.Stat(dir)
		switch {
		case derr != nil && errors.Is(derr, fs.ErrNotExist):
			return fmt.Errorf("store: the folder %s of the database %s does not exist (create it first)", dir, path)
		case derr == nil && !dst.IsDir():
			return fmt.Errorf("store: %s is not a folder, so the database %s cannot be created in it", dir, path)
		}
	}
	return nil
}

// checkWritable explains a database file, or a folder for its -wal and
// -shm files, on a read-only file system or without permission to
// write; other errors are left to SQLite to say.
func checkWritable(path string) error {
	// 0600: the database holds password hashes, sessions and webhook URLs
	// (SQLite gives its -wal and -shm files the database's mode).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return explainWrite(path, err) // nil: SQLite will say what it is
	}
	f.Close()
	// SQLite writes its -wal and -shm files beside the database.
	dir := filepath.Dir(path)
	probe, err := os.CreateTemp(dir, ".cbdash-probe-*")
	if err != nil {
		return explainWrite("the folder "+dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// explainWrite explains why what cannot be written (err): a read-only
// file system or no permission; nil for other errors.
func explainWrite(what string, err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("store: %s is on a read-only file system; the database must be writable", what)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("store: no permission to write %s (check its owner and mode)", what)
	}
	return nil
}

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// Retention says how long each level of history is kept. A zero field
// takes its default; a negative one is refused by Open. The field names
// are the levels of history (fixed by the server contract), not units.
type Retention struct {
	//lint:ignore ST1011 the name is the level of history, not the unit
	Seconds     time.Duration // per-second windows; 0 = 24 h
	Minutes     time.Duration // per-minute windows; 0 = 30 days
	Hours       time.Duration // per-hour windows; 0 = 365 days
	Transitions time.Duration // transitions; 0 = 365 days
	// InstanceMinutes is how long the per-instance history (one row per
	// instance breaker and minute) is kept; 0 = 24 h.
	InstanceMinutes time.Duration
}

// Options configure a Store. The zero value works.
type Options struct {
	// Logger receives the writer's errors and migration notes; nil
	// discards them.
	Logger *slog.Logger
	// Retention per history level; zero fields take the defaults.
	Retention Retention
	// Clock tells the bookkeeping times the caller does not pass (user,
	// token and alert rule creation, token use, the sweep of expired
	// sessions); nil = clock.System(). The server passes its one clock.
	Clock clock.Clock
	// QueueSize bounds the writer queue (operations waiting for a
	// transaction); 0 = 8192. A full queue makes writers wait (bounded by
	// their ctx), never grow memory.
	QueueSize int
	// MaxGroup is the most operations committed in one transaction;
	// 0 = 4096.
	MaxGroup int
	// ReadConns is the size of the read-only connection pool; 0 = 4.
	ReadConns int
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.OrSystem(o.Clock)
	r := &o.Retention
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{
		{&r.Seconds, 24 * time.Hour},
		{&r.Minutes, 30 * 24 * time.Hour},
		{&r.Hours, 365 * 24 * time.Hour},
		{&r.Transitions, 365 * 24 * time.Hour},
		{&r.InstanceMinutes, 24 * time.Hour},
	} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	if o.QueueSize == 0 {
		o.QueueSize = 8192
	}
	if o.MaxGroup == 0 {
		o.MaxGroup = 4096
	}
	if o.ReadConns == 0 {
		o.ReadConns = 4
	}
}

func (o *Options) validate() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"Retention.Seconds", o.Retention.Seconds}, {"Retention.Minutes", o.Retention.Minutes},
		{"Retention.Hours", o.Retention.Hours}, {"Retention.Transitions", o.Retention.Transitions},
		{"Retention.InstanceMinutes", o.Retention.InstanceMinutes},
	} {
		if f.v < 0 {
			return fmt.Errorf("store options: %s is negative (%v)", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"QueueSize", o.QueueSize}, {"MaxGroup", o.MaxGroup}, {"ReadConns", o.ReadConns}} {
		if f.v < 0 {
			return fmt.Errorf("store options: %s is negative (%d)", f.name, f.v)
		}
	}
	return nil
}

// Store is cbdash's database, SQLite or PostgreSQL. Create it with Open
// and release it with Close. All methods are safe for concurrent use.
type Store struct {
	opts Options
	rdb  *readDB // read-only pool, with the backend's dialect
	wdb  *sql.DB // the writer's single connection
	w    *writer

	forgotten atomic.Pointer[func(service, instance string)] // OnBreakersForgotten's (forget.go)

	healthMu  sync.Mutex // Writable's cache
	healthAt  time.Time
	healthErr error

	// testIMScanned, set by tests only, is called by InstanceHistory
	// between its read of the writer's sums and its read of the table.
	testIMScanned func()
}

// sqliteDSN builds a modernc DSN whose PRAGMAs apply to every connection
// the pool opens (a PRAGMA run once on a pool reaches only one connection).
func sqliteDSN(path string, write bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	if write {
		// FULL: a committed (acknowledged) batch survives power loss too.
		q.Add("_pragma", "synchronous(FULL)")
		// Truncate the WAL back to 64 MiB after checkpoints, so a burst
		// does not leave a huge file behind.
		q.Add("_pragma", "journal_size_limit(67108864)")
		q.Add("_pragma", "temp_store(MEMORY)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Open opens the database that dsn names, migrates it to the latest
// schema (each migration in its own transaction) and starts the writer
// goroutine. A dsn starting with postgres:// or postgresql://, or in
// libpq's keyword/value form (host=... dbname=...; see IsPostgres), is a
// PostgreSQL database (see openPostgres); anything else is a SQLite file
// path, a file: URI or :memory:, created if needed. The ctx bounds
// connecting and the migrations only. Errors: an invalid option (naming
// the field); for SQLite a path that is a directory, whose folder does
// not exist, on a read-only file system or not writable (each its own
// message, naming the path); for PostgreSQL a DSN that does not parse or
// a server that cannot be reached (naming the DSN, its password masked);
// a database written by a newer cbdash (naming both schema versions); or
// the driver's error wrapped with the step that failed.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	if IsPostgres(dsn) {
		return openPostgres(ctx, dsn, opts)
	}
	st, err := openSQLite(ctx, dsn, opts)
	return st, dsnpkg.MaskError(dsn, err) // a path with "password=" in it is shown masked too
}

func openSQLite(ctx context.Context, path string, opts Options) (*Store, error) {
	wdb, err := sql.Open("sqlite", sqliteDSN(path, true))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := checkPath(path); err != nil {
		wdb.Close()
		return nil, err
	}
	if err := migrate(ctx, wdb, sqliteDialect, path, opts.Logger); err != nil {
		wdb.Close()
		return nil, err
	}
	rdb, err := sql.Open("sqlite", sqliteDSN(path, false))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	if err := rdb.PingContext(ctx); err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", path, err)
	}
	return start(opts, sqliteDialect, wdb, rdb, 0), nil
}

// Migrate migrates the database that dsn names (see Open) to the latest
// schema and closes it, starting no writer: for what needs the schema
// before a store is open, such as the collectors' bus (internal/cluster)
// on a fresh PostgreSQL database in a test. log nil discards. Errors: as
// Open's.
func Migrate(ctx context.Context, dsn string, log *slog.Logger) error {
	st, err := Open(ctx, dsn, Options{Logger: log})
	if err != nil {
		return err
	}
	return st.Close()
}

// start starts the writer, whose id is writer (see writer.id), on opened,
// migrated pools.
func start(opts Options, d *dialect, wdb, rdb *sql.DB, writer int64) *Store {
	s := &Store{opts: opts, rdb: &readDB{db: rdb, d: d}, wdb: wdb}
	s.w = newWriter(wdb, d, opts)
	s.w.id = writer
	if d.postgres { // a writer's id is new at each Open: none of its rows exists
		s.w.c.written = math.MinInt64
		s.w.c.rowsEmptied()
	}
	go s.w.run()
	return s
}

// migrate applies the embedded migrations that the database lacks. Out of
// order application is allowed because several areas own number ranges
// (see doc.go, Migrations).
func migrate(ctx context.Context, db *sql.DB, d *dialect, name string, log *slog.Logger) error {
	p, err := goose.NewProvider(d.goose(), db, migrationsFS(d),
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true), goose.WithSlog(log))
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	sources := p.ListSources()
	known := sources[len(sources)-1].Version
	if have, err := p.GetDBVersion(ctx); err == nil && have > known {
		return fmt.Errorf("store: %w: the database %s was written by a newer cbdash: its schema is at version %d, this build knows versions up to %d (run the newer cbdash, or open another database)",
			ErrNewerSchema, name, have, known)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	for _, r := range res {
		log.Info("store: migration applied", "version", r.Source.Version, "duration", r.Duration)
	}
	return nil
}

// Close stops accepting writes, lets the writer commit everything already
// queued, and closes both connection pools. Calling it twice is safe; the
// second call returns nil.
func (s *Store) Close() error {
	if !s.w.stop() {
		return nil
	}
	return errors.Join(s.rdb.db.Close(), s.wdb.Close())
}

// migrationsFS is the dialect's embedded migrations directory as goose
// expects it.
func migrationsFS(d *dialect) fs.FS {
	f, err := fs.Sub(migrations, "migrations/"+d.name())
	if err != nil {
		panic(err) // a constant, valid path: cannot happen
	}
	return f
}

// Transient reports whether err, from a write, is the environment's
// trouble that may pass (a full disk, an I/O error, a read-only file, a
// busy or locked database, PostgreSQL unreachable, restarting or failing
// a serialization, the store closed or a canceled context), as opposed to
// one the same write will meet again (a constraint, a schema the
// statement does not fit).
func Transient(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if isPgError(err) {
		return transientPostgres(err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return true // not the database's word: do not give anything up for it
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_BUSY,
		sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_PERM:
		return true
	}
	return false
}
