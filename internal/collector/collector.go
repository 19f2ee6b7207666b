package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/holds"
	"github.com/cbdash/cbdash/internal/ingest"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/quorum"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what agents can make the collector hold (ingest.Limits).
type Limits = ingest.Limits

// ErrStopped is returned by Run when called twice, and reported to agents
// that connect after Run has returned.
var ErrStopped = errors.New("collector stopped")

// Config configures a Collector. The zero value of every field but Store
// works.
type Config struct {
	// Store holds history, transitions and commands; required.
	Store *store.Store
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// StaleAfter is how long an instance may stay silent before it is
	// stale (no longer counted in its dependency's state); 0 = 15 s.
	StaleAfter time.Duration
	// GoneAfter is how long a silent, disconnected instance is kept before
	// it is forgotten; 0 = 10 min.
	GoneAfter time.Duration
	// Clock is the collector's time: the times it stamps, staleness, the
	// publish, sweep and compaction tickers and the pacing of urgent
	// publications all read it; nil = clock.System(). (Websocket write
	// deadlines, and the durations exported as metrics, are real time.)
	Clock clock.Clock
	// Registerer receives the collector's Prometheus series; nil = a
	// private registry.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves; nil = Registerer when it is also a
	// Gatherer (a *prometheus.Registry), else the private registry.
	Gatherer prometheus.Gatherer
	// MetricsToken, when set, is required as "Authorization: Bearer
	// <token>" on /metrics; "" leaves /metrics open like any exporter.
	MetricsToken string
	// SubscriberBuffer is how many events other than dependency views
	// (transitions, commands) may wait for each subscriber; one that lets
	// more wait is dropped. Views do not count: a subscriber has at most
	// the latest view of each dependency waiting. 0 = 4096.
	SubscriberBuffer int
	// PublishInterval is how often dependencies whose counts changed are
	// published (state changes are published at once); 0 = 1 s.
	PublishInterval time.Duration
	// CompactEvery is how often Store.Compact runs (roll-ups and
	// retention); 0 = 1 min.
	CompactEvery time.Duration
	// CommandDelivery is how long a release or reset command (which has no
	// TTL) waits for an offline instance to reconnect; 0 = 10 min.
	CommandDelivery time.Duration
	// WriteTimeout bounds each websocket write to an agent; 0 = 10 s.
	WriteTimeout time.Duration
	// HelloTimeout bounds the wait for an agent's hello; 0 = 10 s.
	HelloTimeout time.Duration
	// AckDelay is how long a session may hold an acknowledgement, to
	// write it with the next ones as one: acks are cumulative
	// (docs/protocol.md), so with 2 s an agent reporting every second gets
	// an ack every second or third batch, a write saved for each other one
	// (the reference agent waits 30 s for an ack before it gives up on a
	// collector). A refusal, a fatal error or the session's end writes a
	// held ack at once, before it. Real time, as WriteTimeout. 0 = every
	// ack at once (cbdash serve --ack-delay, 0 by default).
	AckDelay time.Duration
	// MaxHold is the longest hold (force open or force closed) accepted,
	// from the API, the CLI and the dashboard alike; 0 =
	// cbdash.DefaultMaxHold (24 h).
	MaxHold time.Duration
	// DefaultStops is the stop conditions every hold gets unless it drops
	// them, with a reason (cbdash serve --stop-if); nil = none.
	DefaultStops []cbdash.StopCondition
	// Limits bound the instances and breakers of one agent token and the
	// dependencies of the collector (see Limits; zero values = defaults).
	Limits Limits
	// Quorum is the quorum rules (cbdash serve --quorum-rule, given only
	// with --quorum): the dependencies whose instances are advised to open
	// when enough of their peers opened on their own (package quorum),
	// checked four times a second by the collector that leads. nil = off,
	// the default.
	Quorum []cbdash.QuorumRule
	// NoProbeRotation turns the probe rotation (rules' probes=K) off,
	// server-wide, whatever the rules say (cbdash serve
	// --quorum-probes=false): the kill switch of the rotation alone.
	NoProbeRotation bool
	// Cluster connects the collectors sharing the Store (fleet.go): live
	// updates, holds and routed commands between them, and the leadership
	// of compaction. nil = cluster.NewLocal() (one collector). The
	// collector does not close it.
	Cluster cluster.Bus
	// CollectorID names this collector in its per-collector metrics: the
	// label collector="<CollectorID>" of cbdash_breaker_calls_total and
	// cbdash_breaker_latency_seconds, which count what this collector
	// ingested (sum without (collector) is the fleet's). cbdash serve sets
	// it to the host name and port, as the OTLP export's
	// service.instance.id. "" = Cluster's node id ("local" alone).
	CollectorID string
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.StaleAfter, 15*time.Second)
	def(&c.GoneAfter, 10*time.Minute)
	def(&c.PublishInterval, time.Second)
	def(&c.CompactEvery, time.Minute)
	def(&c.CommandDelivery, 10*time.Minute)
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.HelloTimeout, 10*time.Second)
	def(&c.MaxHold, cbdash.DefaultMaxHold)
	c.Limits.SetDefaults()
	c.Clock = clock.OrSystem(c.Clock)
	if c.Cluster == nil {
		c.Cluster = cluster.NewLocal()
	}
	if c.CollectorID == "" {
		c.CollectorID = c.Cluster.NodeID()
	}
	if c.SubscriberBuffer == 0 {
		c.SubscriberBuffer = 4096
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer = reg
		if c.Gatherer == nil {
			c.Gatherer = reg
		}
	}
	if g, ok := c.Registerer.(prometheus.Gatherer); ok && c.Gatherer == nil {
		c.Gatherer = g
	}
}

func (c *Config) validate() error {
	bad := func(field, why string) error {
		return fmt.Errorf("collector: %w: Config.%s %s", cbdash.ErrInvalid, field, why)
	}
	switch {
	case c.Store == nil:
		return bad("Store", "is required")
	case c.StaleAfter < 0:
		return bad("StaleAfter", "is negative")
	case c.GoneAfter < c.StaleAfter:
		return bad("GoneAfter", "is shorter than StaleAfter")
	case c.SubscriberBuffer < 0:
		return bad("SubscriberBuffer", "is negative")
	case c.PublishInterval < 0, c.CompactEvery < 0, c.CommandDelivery < 0, c.WriteTimeout < 0, c.HelloTimeout < 0, c.AckDelay < 0:
		return bad("PublishInterval/CompactEvery/CommandDelivery/WriteTimeout/HelloTimeout/AckDelay", "is negative")
	case c.MaxHold < 0:
		return bad("MaxHold", "is negative")
	case c.Limits.Validate() != nil:
		return c.Limits.Validate()
	case c.validateQuorum() != nil:
		return c.validateQuorum()
	case c.Gatherer == nil:
		return bad("Gatherer", "is required when Registerer is not a Gatherer")
	}
	return nil
}

// validateQuorum checks Config.Quorum's rules.
func (c *Config) validateQuorum() error {
	for _, r := range c.Quorum {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("collector: Config.Quorum: %w", err)
		}
	}
	return nil
}

// Collector ingests agent streams, keeps live state, fans it out and
// routes commands. Create it with New and start its loops with Run;
// internal/web serves its methods and transports. All methods are safe
// for concurrent use.
type Collector struct {
	cfg     Config
	store   *store.Store
	log     *slog.Logger
	clk     clock.Clock
	now     func() time.Time
	live    liveState
	hub     publisher // live state's, for commands' events
	metrics *metrics
	cmds    *pendingCommands
	ing     *ingest.Pipeline // the agents' transports and the ingest pipeline
	holds   holdManager
	// schedules runs drill schedules through holds.
	schedules *holds.Scheduler
	quorum    *quorum.Advisor // nil when Config.Quorum is empty
	fleet     *fleet

	mu      sync.Mutex
	stopped bool // Run has returned (or is returning)
	running bool

	applyStop chan struct{} // closed to stop live.applyLoop (after the sessions)
	applyDone chan struct{} // closed when live.applyLoop has returned
}

// New returns a Collector. It registers the collector's metrics with
// cfg.Registerer. Errors: cbdash.ErrInvalid naming a bad Config field, or
// the registerer's error (for example a duplicate registration).
func New(cfg Config) (*Collector, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.CollectorID)
	if err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	if err := registerStoreMetrics(cfg.Registerer, cfg.Store); err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	c := &Collector{
		cfg: cfg, store: cfg.Store, log: cfg.Logger, clk: cfg.Clock, now: cfg.Clock.Now,
		metrics: m, cmds: newPendingCommands(),
	}
	c.live = liveState{live.New(live.Config{Now: cfg.Clock.Now, StaleAfter: cfg.StaleAfter, GoneAfter: cfg.GoneAfter,
		SubscriberBuffer: cfg.SubscriberBuffer, Metrics: m,
		// c.holds is set below, before any batch can arrive.
		HoldUntil: func(id string) (time.Time, bool) { return c.holds.Until(id) },
		HoldFor: func(inst cbdash.InstanceRef, breaker, action string) (cbdash.Hold, bool) {
			return c.holds.HoldFor(inst, breaker, action)
		}, FullDetail: fullDetail(cfg.Quorum),
		// c.fleet is set below, before any batch can arrive.
		Applied: func(k live.Key, ts []protocol.Transition, at time.Time) { c.fleet.transitions(k, ts, at) }})}
	c.hub = publisher{c.live.State}
	if err := cfg.Registerer.Register(newLiveGauges(c.live.State)); err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	c.holds = newHoldManager(c)
	c.schedules = holds.NewScheduler(cfg.Store, c.holds.Manager, schedulerNode(cfg.Cluster))
	if len(cfg.Quorum) > 0 {
		qc := quorum.Config{Rules: cfg.Quorum, Holds: c.holds, Live: c.live, Now: c.now, Log: c.log, MaxHold: cfg.MaxHold}
		if !cfg.NoProbeRotation {
			qc.Commands = probeCommands{c}
		}
		c.quorum = quorum.New(qc)
	}
	c.fleet = newFleet(c, cfg.Cluster, fullDetail(cfg.Quorum))
	if err := c.fleet.register(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	if err := registerBusMetrics(cfg.Registerer, c.fleet); err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	c.ing, err = ingest.New(ingest.Config{Store: cfg.Store, Live: c.live.State, Holds: holdsHooks{c.holds}, Commands: commandHooks{c},
		Fleet: fleetHooks{c.fleet}, Logger: cfg.Logger, Now: cfg.Clock.Now, Limits: cfg.Limits, StaleAfter: cfg.StaleAfter,
		WriteTimeout: cfg.WriteTimeout, HelloTimeout: cfg.HelloTimeout, AckDelay: cfg.AckDelay, Registerer: cfg.Registerer})
	if err != nil {
		return nil, fmt.Errorf("collector: metrics: %w", err)
	}
	return c, nil
}

// Store returns the store the collector writes to.
func (c *Collector) Store() *store.Store { return c.store }

// Run restores live state from the store, then runs the background loops
// (publishing changed dependencies, the stale sweep, command and hold expiry, store
// compaction every CompactEvery) until ctx is done. On return every agent
// connection has been closed and every subscriber dropped. Agents that
// connect before Run has restored state, or after it returned, are refused
// with 503. It returns nil after ctx is done, ErrStopped when called twice,
// or the store's error when the restore fails.
func (c *Collector) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running || c.stopped {
		c.mu.Unlock()
		return ErrStopped
	}
	c.running = true
	c.mu.Unlock()
	defer c.shutdown()
	if err := c.restore(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.applyStop, c.applyDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.applyDone)
		c.live.ApplyLoop(c.applyStop)
	}()
	c.ing.Open()
	c.mu.Unlock()
	defer c.startFleet(ctx)()
	probeCtx, stopProber := context.WithCancel(ctx)
	proberDone := make(chan struct{})
	go func() {
		defer close(proberDone)
		c.ing.RunProber(probeCtx, c.clk)
	}()
	defer func() { stopProber(); <-proberDone }()
	c.loop(ctx)
	return nil
}

// loop publishes live state, sweeps and compacts on the clock until ctx
// ends.
func (c *Collector) loop(ctx context.Context) {
	publish, stopPublish := c.clk.NewTicker(c.cfg.PublishInterval)
	defer stopPublish()
	sweep, stopSweep := c.clk.NewTicker(time.Second)
	defer stopSweep()
	stops, stopStops := c.clk.NewTicker(250 * time.Millisecond) // drills' stop conditions
	defer stopStops()
	compact, stopCompact := c.clk.NewTicker(c.cfg.CompactEvery)
	defer stopCompact()
	urgent := clock.NewTimer(c.clk, time.Hour)
	defer urgent.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.live.Kicked():
			if wait := c.live.FlushUrgent(); wait > 0 {
				urgent.Reset(wait)
			}
		case <-urgent.C:
			if wait := c.live.FlushUrgent(); wait > 0 {
				urgent.Reset(wait)
			}
		case <-publish:
			c.live.Flush()
		case <-stops:
			c.checkHolds(ctx)
		case <-sweep:
			c.live.Sweep()
			c.expireCommands(ctx)
			c.holds.sweep(ctx)
			c.schedules.Tick(ctx)
			c.ing.CloseRevokedSessions(ctx)
		case <-compact:
			if !c.fleet.leadsCompaction() {
				continue
			}
			if err := c.store.Compact(ctx, c.now()); err != nil && ctx.Err() == nil {
				c.log.Error("compact", "err", err)
			}
		}
	}
}

// checkHolds checks the drills' stop conditions and, on the collector
// that leads (one advises for the cluster), the quorum rules.
func (c *Collector) checkHolds(ctx context.Context) {
	c.holds.CheckStops(ctx)
	if c.quorum != nil && c.fleet.leadsCompaction() {
		c.quorum.Check(ctx)
	}
}

// restore rebuilds the holds and live state (instances, opens today,
// commands still pending) from the store.
func (c *Collector) restore(ctx context.Context) error {
	// Holds first: live state's restored lines that are forced ask them
	// which hold governs them (live.Config.HoldFor).
	if err := c.holds.restore(ctx); err != nil {
		return fmt.Errorf("collector: restore holds: %w", err)
	}
	ibs, err := c.store.Instances(ctx)
	if err != nil {
		return fmt.Errorf("collector: restore instances: %w", err)
	}
	for i := range ibs {
		if !cbdash.NotClosed(ibs[i].State) {
			continue
		}
		if err := c.restoreEpisode(ctx, &ibs[i]); err != nil {
			return fmt.Errorf("collector: restore open since: %w", err)
		}
	}
	c.live.Restore(ibs)
	now := c.now().UTC()
	opens, err := c.store.OpensSince(ctx, now.Truncate(24*time.Hour))
	if err != nil {
		return fmt.Errorf("collector: restore opens: %w", err)
	}
	c.live.SetOpensToday(opens)
	cmds, err := c.store.Commands(ctx, cbdash.CommandQuery{Limit: 1000})
	if err != nil {
		return fmt.Errorf("collector: restore commands: %w", err)
	}
	for _, cmd := range cmds {
		c.cmds.track(cmd)
	}
	return nil
}

// episodeLookback bounds the stored transitions read to find when a
// breaker's episode out of closed began; a breaker that flapped longer
// is said open since the oldest of them.
const episodeLookback = 500

// restoreEpisode sets ib's OpenSince, and LastTrip when the episode
// began with a trip, from its stored transitions (newest first): the
// episode began with the latest move out of closed or forced closed.
func (c *Collector) restoreEpisode(ctx context.Context, ib *cbdash.InstanceBreaker) error {
	trs, err := c.store.Transitions(ctx, cbdash.TransitionQuery{
		Service: ib.Service, Breaker: ib.Breaker, Instance: ib.Instance, Limit: episodeLookback,
	})
	if err != nil {
		return err
	}
	start := episodeOf(trs)
	if start == nil {
		return nil
	}
	ib.OpenSince = time.UnixMilli(start.At).UTC()
	if start.From == protocol.StateClosed && start.To == protocol.StateOpen {
		trip := start.Transition
		ib.LastTrip, ib.LastTripReceivedAt = &trip, start.ReceivedAt
	}
	return nil
}

// episodeOf is the transition that began the episode out of closed that
// trs (one breaker's transitions, newest first) end in: the oldest of
// them when the lookback ends first; nil when they end closed.
func episodeOf(trs []cbdash.TransitionRecord) *cbdash.TransitionRecord {
	var start *cbdash.TransitionRecord
	for i := range trs {
		t := &trs[i]
		if !cbdash.NotClosed(t.To) {
			break
		}
		start = t
		if !cbdash.NotClosed(t.From) {
			break
		}
	}
	return start
}

// shutdown refuses new agents, closes every session and waits for them,
// then drops every subscriber.
func (c *Collector) shutdown() {
	c.mu.Lock()
	c.stopped = true
	stop, done := c.applyStop, c.applyDone
	c.mu.Unlock()
	c.ing.Close()
	if stop != nil {
		close(stop)
		<-done
	}
	c.holds.flushStats(context.Background()) // every window applied is in
	c.live.Close()
}

// Ready is closed once Run has restored live state and takes agents and
// Ingest (it stays closed after Run returns, when both are refused
// again). A pull source waits on it before its first batch.
func (c *Collector) Ready() <-chan struct{} { return c.ing.Ready() }

// Dependencies returns the live state of every dependency, worst state
// first (then by service and breaker name). The result is a copy.
func (c *Collector) Dependencies() []cbdash.Dependency { return c.live.Dependencies() }

// Dependency returns the live state of one dependency, or an error
// wrapping cbdash.ErrNotFound. Its PerInstance lists every member: the
// lines of those served here, and the store's last state of those
// another collector serves (members.go).
func (c *Collector) Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error) {
	d, ok := c.live.Dependency(k)
	if !ok {
		return d, fmt.Errorf("dependency %s: %w", k, cbdash.ErrNotFound)
	}
	return c.withMembers(d), nil
}

// Service summarises one service's live state (live.Service).
type Service = live.Service

// Services summarises the known services, sorted by name.
func (c *Collector) Services() []Service { return c.live.Services() }

// Subscribe returns the current live state and a channel of every later
// change, atomically: no change is both in the snapshot and an event, and
// none is missed. A subscriber that lags gets the latest view of each
// dependency (an older one still waiting is skipped) and every other
// event in order; one with more than Config.SubscriberBuffer of those
// waiting is dropped and the channel closed, as it is when Run returns (or
// shortly after cancel). Call cancel when done (idempotent). The snapshot's and
// the events' slices, maps and pointers are shared between subscribers
// and must not be modified.
func (c *Collector) Subscribe() (snapshot []cbdash.Dependency, events <-chan cbdash.Event, cancel func()) {
	return c.live.Subscribe(nil, 0)
}

// SubscribeViews is Subscribe with the snapshot's views shared rather
// than copied, in no order: each points at the collector's immutable
// view of a dependency (the one its events carry), which the caller
// must not change. A subscriber that keeps every dependency (the
// dashboard's live overview) holds a pointer each instead of a copy
// (about 500 bytes a dependency).
func (c *Collector) SubscribeViews() (snapshot []*cbdash.Dependency, events <-chan cbdash.Event, cancel func()) {
	return c.live.SubscribeViews(nil, 0)
}

// schedulerNode names this collector in the schedule runs it claims: its
// cluster node id, with the host and process of a collector alone
// ("local"), so that a run taken over after a restart names both.
func schedulerNode(b cluster.Bus) string {
	id := b.NodeID()
	if id != "local" {
		return id
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("local %s pid %d", host, os.Getpid())
}
