package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/dsn"
)

// busChannel is the one PostgreSQL channel of the fan-out; a node's own
// channel, for what is routed to it, is nodeChannelPrefix + its id.
const (
	busChannel        = "cbdash_bus"
	nodeChannelPrefix = "cbdash_n_"
	// maxNotify is PostgreSQL's limit of a NOTIFY payload (8000 bytes in
	// the default build); larger messages go by reference.
	maxNotify = 8000
	// payloadKeep is how long a message sent by reference stays in
	// cbdash_cluster_payloads: long enough for every listener to read it.
	payloadKeep = 10 * time.Minute
)

var nodeIDPattern = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// Config configures a Postgres bus. URL is required; every other zero
// field means its documented default.
type Config struct {
	// URL is the PostgreSQL connection string the collectors share
	// (postgres://user:pass@host:5432/db?sslmode=..., or libpq's
	// keyword/value form host=... user=... password=... dbname=...).
	URL string
	// NodeID identifies this collector: 1-40 of a-z, 0-9 and _. "" means
	// 26 random characters of a-z and 2-7 (crypto/rand.Text in lower
	// case, a new id each start).
	NodeID string
	// Clock paces reconnects and the leader's tries and checks; nil means
	// the system clock.
	Clock clock.Clock
	// Logger receives lost connections and dropped subscribers; nil
	// discards.
	Logger *slog.Logger
	// SubscriberBuffer is each subscriber's channel size; a subscriber
	// that lets it fill is dropped. 0 means 1024.
	SubscriberBuffer int
	// SubscriberBytes bounds the payload bytes waiting in a subscriber's
	// channel: a subscriber that lets them exceed it is dropped too
	// (messages up to about 8 KB inline, larger ones by reference, read
	// whole). 0 means DefaultSubscriberBytes.
	SubscriberBytes int64
	// LeaderRetry is how often a node that is not the leader of a
	// singleton tries its lock; 0 means 1s. LeaderCheck is how often the
	// leader checks that its lock's connection is alive (how long it may
	// go on after losing it); 0 means 1s.
	LeaderRetry, LeaderCheck time.Duration
	// Reconnect is the wait before a lost connection (listening or
	// leading) is dialled again; 0 means 1s.
	Reconnect time.Duration
}

func (c *Config) setDefaults() error {
	if c.URL == "" {
		return fmt.Errorf("%w: Config.URL is required", ErrInvalid)
	}
	if c.NodeID == "" {
		c.NodeID = strings.ToLower(rand.Text())
	}
	if !nodeIDPattern.MatchString(c.NodeID) {
		return fmt.Errorf("%w: Config.NodeID %q (want 1-40 of a-z, 0-9, _)", ErrInvalid, c.NodeID)
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"LeaderRetry", &c.LeaderRetry}, {"LeaderCheck", &c.LeaderCheck}, {"Reconnect", &c.Reconnect}} {
		if *d.v < 0 {
			return fmt.Errorf("%w: Config.%s is negative", ErrInvalid, d.name)
		}
		if *d.v == 0 {
			*d.v = time.Second
		}
	}
	switch {
	case c.SubscriberBuffer < 0:
		return fmt.Errorf("%w: Config.SubscriberBuffer is negative", ErrInvalid)
	case c.SubscriberBytes < 0:
		return fmt.Errorf("%w: Config.SubscriberBytes is negative", ErrInvalid)
	case c.SubscriberBuffer == 0:
		c.SubscriberBuffer = 1024
	}
	if c.SubscriberBytes == 0 {
		c.SubscriberBytes = DefaultSubscriberBytes
	}
	return nil
}

// DefaultSubscriberBytes is Config.SubscriberBytes's default: 32 MiB of
// payloads waiting for one subscriber (about 4,000 full NOTIFY payloads).
const DefaultSubscriberBytes = 32 << 20

// SubscriberStats returns the payload bytes waiting in this node's
// subscribers' channels (each bounded by Config.SubscriberBytes) and how
// many subscribers were dropped for falling behind since Open.
func (p *Postgres) SubscriberStats() (heldBytes int64, dropped int) { return p.subs.stats() }

// Postgres is the Bus of collectors sharing one PostgreSQL database (see
// the package doc). It uses a small pool for publishing and routing, one
// connection of its own for listening, and one per singleton it leads or
// tries to. Its methods are safe for concurrent use.
type Postgres struct {
	ns      string                   // "" in the schema public, else a suffix naming the schema (see namespace)
	peers   atomic.Int64             // see Peers
	peerIDs atomic.Pointer[[]string] // see PeerIDs
	cfg     Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	subs    *subscribers

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	pubMu       sync.Mutex // one publisher at a time: this node's messages keep their order
	lastCleanup time.Time  // guarded by pubMu

	mu       sync.Mutex
	listener listenerID         // the listening connection, zero while it is down
	claims   map[[2]string]bool // the instances this node holds
	leading  map[string]bool    // singletons this node leads now
	closed   bool
}

// listenerID identifies the listening connection in pg_stat_activity: a
// route is alive as long as the connection is.
type listenerID struct {
	pid   uint32
	start time.Time
}

var _ Bus = (*Postgres)(nil)

// envelope is a NOTIFY payload.
type envelope struct {
	From    string `json:"f"`
	Channel string `json:"c"`
	Data    string `json:"d,omitempty"` // the payload, when inline
	Ref     int64  `json:"r,omitempty"` // else its row in cbdash_cluster_payloads
}

// Open connects to the database and starts listening; it returns once the
// listening connection is up. The bus's two tables are the store's: the
// database must have been migrated by store.Open (or store.Migrate)
// first. Errors: ErrInvalid naming a bad Config field, ErrNoSchema when
// the tables are missing, or the database's.
func Open(ctx context.Context, cfg Config) (*Postgres, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", dsn.MaskError(cfg.URL, err))
	}
	if err := checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	ns, err := namespace(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	p := &Postgres{
		ns: ns, cfg: cfg, log: cfg.Logger.With("component", "cluster", "node", cfg.NodeID), pool: pool,
		subs: newSubscribers(cfg.SubscriberBuffer, cfg.SubscriberBytes), claims: map[[2]string]bool{}, leading: map[string]bool{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.peers.Store(-1)
	p.wg.Add(1)
	go p.peersLoop()
	ready := make(chan error, 1)
	p.wg.Add(1)
	go p.listenLoop(ready)
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("cluster: listening: %w", err)
	}
	// Say so at once: nodes that counted no peer (see Peers) publish again
	// from now on, not from their next count.
	if err := p.notify(ctx, p.busChan(), joinChannel, nil); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// joinChannel carries the message a node sends when it starts listening.
const joinChannel = "cluster_join"

// checkSchema fails unless the bus's tables are there: they are the
// store's (migration 00041, internal/store/migrations/postgres), so the
// store opens the database, which migrates it, before the bus does.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var ok bool
	err := pool.QueryRow(ctx, `SELECT to_regclass('cbdash_cluster_payloads') IS NOT NULL
	AND to_regclass('cbdash_cluster_routes') IS NOT NULL`).Scan(&ok)
	switch {
	case err != nil:
		return fmt.Errorf("cluster: reading the schema: %w", err)
	case !ok:
		return fmt.Errorf("cluster: %w", ErrNoSchema)
	}
	return nil
}

// namespace returns "" when the connections' schema is public, else "_"
// and 8 hex digits of a hash of its name. Channels and advisory locks are
// the database's, not the schema's: two deployments in two schemas of one
// database (each with its own tables, by search_path) suffix their
// channels and lock names with it so that they do not hear each other or
// share leaders.
func namespace(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return "", fmt.Errorf("cluster: reading the schema: %w", err)
	}
	if schema == "public" || schema == "" {
		return "", nil
	}
	h := fnv.New32a()
	h.Write([]byte(schema))
	return fmt.Sprintf("_%08x", h.Sum32()), nil
}

// busChan is the PostgreSQL channel of the fan-out; nodeChan that of what
// is routed to node.
func (p *Postgres) busChan() string { return busChannel + p.ns }

func (p *Postgres) nodeChan(node string) string { return nodeChannelPrefix + node + p.ns }

// lockKey is the advisory lock key of a singleton name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("cbdash/" + name))
	return int64(h.Sum64())
}

// NodeID returns Config.NodeID.
func (p *Postgres) NodeID() string { return p.cfg.NodeID }

// Publish NOTIFYs payload to every other node. A payload that is not
// UTF-8 text without NUL, or that makes a NOTIFY larger than 8000 bytes,
// is stored in cbdash_cluster_payloads (kept 10 minutes) and sent by
// reference in the same transaction.
func (p *Postgres) Publish(ctx context.Context, channel string, payload []byte) error {
	if err := checkChannel(channel); err != nil {
		return err
	}
	return p.notify(ctx, p.busChan(), channel, payload)
}

// Subscribe returns the messages of channel that other nodes publish or
// route here. See Bus.
func (p *Postgres) Subscribe(channel string) (<-chan Message, func()) { return p.subs.add(channel) }

func (p *Postgres) notify(ctx context.Context, pgChannel, channel string, payload []byte) error {
	if p.isClosed() {
		return ErrClosed
	}
	env := envelope{From: p.cfg.NodeID, Channel: channel}
	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	if utf8.Valid(payload) && !strings.ContainsRune(string(payload), 0) {
		env.Data = string(payload)
		if data, err := json.Marshal(env); err == nil && len(data) <= maxNotify {
			if _, err := p.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, pgChannel, string(data)); err != nil {
				return fmt.Errorf("cluster: notify: %w", err)
			}
			return nil
		}
		env.Data = ""
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("cluster: notify: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The row only has to outlive its readers, not a crash of the
	// database: no wait for the WAL to reach the disk.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit TO OFF`); err != nil {
		return fmt.Errorf("cluster: notify: %w", err)
	}
	if now := p.cfg.Clock.Now(); now.Sub(p.lastCleanup) > time.Minute {
		if _, err := tx.Exec(ctx, `DELETE FROM cbdash_cluster_payloads WHERE created_at < now() - $1::interval`, payloadKeep.String()); err != nil {
			return fmt.Errorf("cluster: notify: cleanup: %w", err)
		}
		p.lastCleanup = now
	}
	if err := tx.QueryRow(ctx, `INSERT INTO cbdash_cluster_payloads (body) VALUES ($1) RETURNING id`, payload).Scan(&env.Ref); err != nil {
		return fmt.Errorf("cluster: notify: storing the payload: %w", err)
	}
	data, _ := json.Marshal(env)
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, pgChannel, string(data)); err != nil {
		return fmt.Errorf("cluster: notify: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("cluster: notify: %w", err)
	}
	return nil
}

// Claim records that the instance is connected to this node (its route
// lives as long as this node's listening connection; a lost one is
// claimed again on reconnecting).
func (p *Postgres) Claim(ctx context.Context, service, instance string) error {
	if err := checkInstance(service, instance); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.claims[[2]string{service, instance}] = true
	l := p.listener
	p.mu.Unlock()
	if l.pid == 0 {
		return nil // written when the listening connection is back
	}
	return p.writeClaim(ctx, p.pool, l, service, instance)
}

// execer is a pool or a connection.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (p *Postgres) writeClaim(ctx context.Context, db execer, l listenerID, service, instance string) error {
	_, err := db.Exec(ctx, `
INSERT INTO cbdash_cluster_routes (service, instance, node, pid, backend_start) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (service, instance) DO UPDATE SET node = excluded.node, pid = excluded.pid,
	backend_start = excluded.backend_start, claimed_at = now()`, service, instance, p.cfg.NodeID, int32(l.pid), l.start)
	if err != nil {
		return fmt.Errorf("cluster: claim: %w", err)
	}
	return nil
}

// Release removes this node's claim of the instance; a claim another node
// made since stays.
func (p *Postgres) Release(ctx context.Context, service, instance string) error {
	if err := checkInstance(service, instance); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.claims, [2]string{service, instance})
	p.mu.Unlock()
	if p.isClosed() {
		return ErrClosed
	}
	if _, err := p.pool.Exec(ctx, `DELETE FROM cbdash_cluster_routes WHERE service = $1 AND instance = $2 AND node = $3`,
		service, instance, p.cfg.NodeID); err != nil {
		return fmt.Errorf("cluster: release: %w", err)
	}
	return nil
}

// Route sends payload to the node whose live listening connection claimed
// the instance; to this node's own subscribers when that is this node.
func (p *Postgres) Route(ctx context.Context, channel, service, instance string, payload []byte) error {
	if err := checkChannel(channel); err != nil {
		return err
	}
	if err := checkInstance(service, instance); err != nil {
		return err
	}
	if p.isClosed() {
		return ErrClosed
	}
	var node string
	err := p.pool.QueryRow(ctx, `
SELECT r.node FROM cbdash_cluster_routes r
JOIN pg_stat_activity a ON a.pid = r.pid AND a.backend_start = r.backend_start
WHERE r.service = $1 AND r.instance = $2`, service, instance).Scan(&node)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNoRoute
	case err != nil:
		return fmt.Errorf("cluster: route: %w", err)
	case node == p.cfg.NodeID:
		p.subs.deliver(Message{Channel: channel, From: node, Payload: payload})
		return nil
	}
	return p.notify(ctx, p.nodeChan(node), channel, payload)
}

// Claims lists the live claims of every node: those whose claiming
// connection is still in pg_stat_activity (as Route finds them).
func (p *Postgres) Claims(ctx context.Context) ([]Claim, error) {
	if p.isClosed() {
		return nil, ErrClosed
	}
	rows, err := p.pool.Query(ctx, `
SELECT r.service, r.instance, r.node FROM cbdash_cluster_routes r
JOIN pg_stat_activity a ON a.pid = r.pid AND a.backend_start = r.backend_start`)
	if err != nil {
		return nil, fmt.Errorf("cluster: claims: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) {
		var c Claim
		err := row.Scan(&c.Service, &c.Instance, &c.Node)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: claims: %w", err)
	}
	return out, nil
}

func (p *Postgres) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops listening and leading, closes the subscribers' channels and
// the pool. Lead calls return once their fn has.
func (p *Postgres) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.subs.close()
	p.pool.Close()
	return nil
}

// Leading reports whether this node leads the singleton name now.
func (p *Postgres) Leading(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leading[name]
}

// wait waits d on the configured clock; false when ctx ended first.
func (p *Postgres) wait(ctx context.Context, d time.Duration) bool {
	t := clock.NewTimer(p.cfg.Clock, d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
