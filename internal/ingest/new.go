package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Store is what the pipeline reads and writes of the store
// (*store.Store): agent tokens, hellos, batches, the commands waiting
// for an instance, and the probe that says whether it commits.
type Store interface {
	CheckAgentToken(ctx context.Context, token string) (service string, err error)
	RevokeAgentToken(ctx context.Context, actor, id string) error
	LiveAgentTokens(ctx context.Context, ids []string, now time.Time) (map[string]bool, error)
	SaveHello(ctx context.Context, h protocol.Hello, at time.Time) error
	LastSeq(ctx context.Context, service, instance string, startedAt int64) (uint64, error)
	SaveBatch(ctx context.Context, service, instance string, startedAt int64, b protocol.Batch, at time.Time) (bool, error)
	NewStream(service, instance string, startedAt int64, size int) (*store.Stream, error)
	PendingCommands(ctx context.Context, service, instance string, now time.Time) ([]cbdash.Command, error)
	CommandTargets(ctx context.Context, service, instance string, ids []string) (map[string]bool, error)
	Probe(ctx context.Context) error
}

// Holds is what the pipeline tells the holds: an instance said hello
// on a connection (its holds are sent to it), an instance on HTTP ingest
// reported (its holds go out as pending commands), and a batch's window
// reports were stored (counted for the holds covering them).
type Holds interface {
	Hello(ctx context.Context, k live.Key)
	Pull(ctx context.Context, k live.Key)
	Observe(k live.Key, ws []protocol.Window)
}

// Commands is told the results a stored batch of instance k carried.
type Commands interface {
	Results(k live.Key, rs []protocol.CommandResult)
}

// Fleet is the other collectors of a cluster: they are told each hello
// (last: the last stored seq; connected: over a websocket, so that
// commands for the instance are routed here) and each batch as applied
// here, and when an instance's connection here ended.
type Fleet interface {
	Hello(ctx context.Context, h *protocol.Hello, last uint64, at time.Time, connected bool)
	Batch(r live.Update)
	Disconnected(k live.Key)
}

// Config configures a Pipeline; every field is required but Holds,
// Commands and Fleet (nil: none), and the durations, whose zero values
// are the collector's defaults (see collector.Config).
type Config struct {
	Store    Store
	Live     *live.State
	Holds    Holds
	Commands Commands
	Fleet    Fleet
	Logger   *slog.Logger
	// Now is the collector's clock (see collector.Config.Clock).
	Now func() time.Time
	// Limits bound what agent tokens and services may declare.
	Limits Limits
	// StaleAfter, WriteTimeout, HelloTimeout and AckDelay are
	// collector.Config's.
	StaleAfter, WriteTimeout, HelloTimeout, AckDelay time.Duration
	// Registerer receives the pipeline's Prometheus series.
	Registerer prometheus.Registerer
}

// Pipeline is the ingest pipeline (pipeline.go) with its two transports,
// the agent websocket (ServeAgent) and HTTP ingest (ServeIngest), and the
// sources in the server's own process (Ingest). It refuses agents until
// Open, and again from Close. All methods are safe for concurrent use.
type Pipeline struct {
	cfg      Config
	store    Store
	live     *live.State
	holds    Holds
	commands Commands
	fleet    Fleet
	log      *slog.Logger
	now      func() time.Time
	metrics  *metrics
	tokens   *tokenUsage // what each agent token declared, against Config.Limits
	skews    sync.Map    // live.Key -> *skewEst

	// health says whether the store commits, and which failed batches
	// are refused for good (storehealth.go).
	health *storeHealth

	mu         sync.Mutex
	sessions   map[*session]struct{}
	tokenConns map[string]int // open websocket sessions by agent token id (Limits.MaxConnectionsPerToken)
	ready      bool           // Open was called, and not Close
	readyCh    chan struct{}  // closed when ready is first set (Ready)
	stopped    bool           // Close was called
	wg         sync.WaitGroup // session goroutines
}

// New returns a Pipeline, its metrics registered with cfg.Registerer
// (the registerer's error, for example a duplicate registration).
func New(cfg Config) (*Pipeline, error) {
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Pipeline{cfg: cfg, store: cfg.Store, live: cfg.Live, holds: cfg.Holds, commands: cfg.Commands, fleet: cfg.Fleet,
		log: cfg.Logger, now: cfg.Now, metrics: m, tokens: newTokenUsage(), health: newStoreHealth(),
		sessions: make(map[*session]struct{}), tokenConns: make(map[string]int), readyCh: make(chan struct{})}
	if c.holds == nil {
		c.holds = noHolds{}
	}
	if c.commands == nil {
		c.commands = noCommands{}
	}
	if c.fleet == nil {
		c.fleet = noFleet{}
	}
	return c, nil
}

type (
	noHolds    struct{}
	noCommands struct{}
	noFleet    struct{}
)

func (noHolds) Hello(context.Context, live.Key)                                 {}
func (noHolds) Pull(context.Context, live.Key)                                  {}
func (noHolds) Observe(live.Key, []protocol.Window)                             {}
func (noCommands) Results(live.Key, []protocol.CommandResult)                   {}
func (noFleet) Hello(context.Context, *protocol.Hello, uint64, time.Time, bool) {}
func (noFleet) Batch(live.Update)                                               {}
func (noFleet) Disconnected(live.Key)                                           {}

// Open takes agents and Ingest from now on (the collector opens the
// pipeline once it has restored live state); false after Close.
func (c *Pipeline) Open() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	if !c.ready {
		c.ready = true
		close(c.readyCh)
	}
	return true
}

// Close refuses new agents, ends every session (a going-away error) and
// waits for them: their batches are committed or skipped, and answered,
// before it returns.
func (c *Pipeline) Close() {
	c.mu.Lock()
	c.stopped, c.ready = true, false
	for s := range c.sessions {
		s.goingAway("collector stopping")
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// Ready is closed once Open was called (it stays closed after Close,
// when agents and Ingest are refused again). A pull source waits on it
// before its first batch.
func (c *Pipeline) Ready() <-chan struct{} { return c.readyCh }

// StoreErr is why the store is failing (storehealth.go), nil when it
// commits: batches are then not acknowledged, and the collector is not
// ready.
func (c *Pipeline) StoreErr() error { return c.health.err() }

// RunProber probes the store while it is failing, and when a failure or
// a commit asks for it, until ctx is done (storehealth.go).
func (c *Pipeline) RunProber(ctx context.Context, clk clock.Clock) {
	c.health.runProber(ctx, clk, c.store, c.log)
}

func (c *Pipeline) isReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready && !c.stopped
}

// addSession registers a session; false after Close began or before
// Open.
func (c *Pipeline) addSession(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready || c.stopped {
		return false
	}
	c.sessions[s] = struct{}{}
	c.tokenConns[s.tokenID]++
	c.wg.Add(1)
	c.metrics.connections.Set(float64(len(c.sessions)))
	return true
}

// tokenConnections returns how many websocket sessions of agent token id
// are open (the caller's included).
func (c *Pipeline) tokenConnections(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokenConns[id]
}

func (c *Pipeline) removeSession(s *session) {
	c.mu.Lock()
	delete(c.sessions, s)
	if c.tokenConns[s.tokenID]--; c.tokenConns[s.tokenID] <= 0 {
		delete(c.tokenConns, s.tokenID)
	}
	c.metrics.connections.Set(float64(len(c.sessions)))
	c.mu.Unlock()
	c.wg.Done()
}

// Sessions is how many agent websocket sessions are open.
func (c *Pipeline) Sessions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sessions)
}

// conn is s as live state keeps it: nil (no connection, HTTP ingest)
// when s is.
func conn(s *session) live.Conn {
	if s == nil {
		return nil
	}
	return s
}

// Send, Replaced and Quiet make a session a live.Conn.
func (s *session) Send(v any)             { s.send(v) }
func (s *session) Replaced()              { s.replaced() }
func (s *session) Quiet() <-chan struct{} { return s.quiet }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", cbdash.ErrInvalid, fmt.Sprintf(format, args...))
}

// unavailable is a retry-later refusal with its reason, for the error
// handler's 503.
func unavailable(reason string) error {
	return fmt.Errorf("%s: %w", reason, cbdash.ErrUnavailable)
}

// Bearer returns the token of an "Authorization: Bearer" header.
func Bearer(r *http.Request) string { return bearer(r) }

// Accepting reports whether the pipeline takes agents: opened, and not
// closed.
func (c *Pipeline) Accepting() bool { return c.isReady() }
