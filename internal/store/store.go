package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/cbdash/cbdash/internal/clock"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrClosed is returned by writes after Close has been called.
var ErrClosed = errors.New("store: closed")

//go:embed migrations/*.sql
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

// Store is cbdash's SQLite database. Create it with Open and release it
// with Close. All methods are safe for concurrent use.
type Store struct {
	opts Options
	rdb  *sql.DB // read-only pool
	wdb  *sql.DB // the writer's single connection
	w    *writer
}

// dsn builds a modernc DSN whose PRAGMAs apply to every connection the pool
// opens (a PRAGMA run once on a pool reaches only one connection).
func dsn(path string, write bool) string {
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
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path, migrates it to the
// latest schema (each migration in its own transaction) and starts the
// writer goroutine. The ctx bounds the migrations only. Errors: an
// invalid option (naming the field), or the driver's error
// wrapped with the step that failed.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	wdb, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := migrate(ctx, wdb, opts.Logger); err != nil {
		wdb.Close()
		return nil, err
	}
	rdb, err := sql.Open("sqlite", dsn(path, false))
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
	s := &Store{opts: opts, rdb: rdb, wdb: wdb}
	s.w = newWriter(wdb, opts)
	go s.w.run()
	return s, nil
}

// migrate applies the embedded migrations that the database lacks. Out of
// order application is allowed because several packages own number ranges
// (see docs: 00001-00009 store, 00010-00019 users, 00020-00029 incidents).
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrationsFS(),
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true), goose.WithSlog(log))
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
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
	return errors.Join(s.rdb.Close(), s.wdb.Close())
}

// migrationsFS is the embedded migrations directory as goose expects it.
func migrationsFS() fs.FS {
	f, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // a constant, valid path: cannot happen
	}
	return f
}
