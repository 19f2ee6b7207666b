package alert

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Source is the collector's live feed: a snapshot and the events after it.
// *collector.Collector implements it.
type Source interface {
	Subscribe() (snapshot []cbdash.Dependency, events <-chan cbdash.Event, cancel func())
}

// Store holds alert rules and the delivery log. *store.Store implements it.
type Store interface {
	Log
	AlertRules(ctx context.Context) ([]cbdash.AlertRule, error)
	AlertRule(ctx context.Context, id int64) (cbdash.AlertRule, error)
	CreateAlertRule(ctx context.Context, r cbdash.AlertRule) (cbdash.AlertRule, error)
	UpdateAlertRule(ctx context.Context, r cbdash.AlertRule) error
	DeleteAlertRule(ctx context.Context, id int64) error
	AlertDeliveries(ctx context.Context, q cbdash.DeliveryQuery) ([]cbdash.AlertDelivery, error)
	// Incidents lists incidents, newest first: an open alert's
	// payload links to the incident of its open (Notification.Incident).
	Incidents(ctx context.Context, q cbdash.IncidentQuery) ([]cbdash.Incident, error)
	// FallbackFreshness says when each breaker was first known and its
	// fallbacks last served rejected calls, from the stored history: a
	// fallback_unexercised rule reads it once per Run (the live state
	// forgets fallback runs on a restart).
	FallbackFreshness(ctx context.Context) ([]cbdash.FallbackFreshness, error)
	StateStore
	SilenceStore
}

// Config wires a Service. Source and Store are required; the rest has
// working zero values.
type Config struct {
	Source Source
	Store  Store
	Logger *slog.Logger // nil = discard
	// Clock is the time of rule evaluation and of the Interval loop, and
	// the Delivery's clock when that has none; nil = clock.System(). The
	// server passes its one clock.
	Clock clock.Clock
	// Interval is how often every rule is evaluated (0 = 1 s). A
	// transition to open is evaluated at once.
	Interval time.Duration
	// QueueSize bounds the notifications waiting for delivery to one
	// rule's webhook (0 = 64); when full, new ones of that rule are
	// dropped and counted. Each rule has its own queue and delivery
	// goroutine, so a dead receiver delays its own rule's alerts only.
	QueueSize int
	Delivery  DeliveryConfig
	// Margin is how far before the stored mark Run replays the stored
	// trips (0 = DefaultReplayMargin); see Run.
	Margin time.Duration
	// PendingGrace is how long Run waits before sending again the
	// notifications a previous Run (of this collector or another) left
	// undelivered (0 = DefaultPendingGrace): a leader that has not yet
	// noticed it lost its lock may still be delivering them, and those it
	// acknowledges meanwhile are not sent again.
	PendingGrace time.Duration
	// ExternalURL is the dashboard's address as a receiver's reader
	// reaches it ("https://cbdash.example.com"; the serve flag
	// --external-url, after Alertmanager's): every payload links to the
	// subject's page there (Link). "" = no link.
	ExternalURL string
	// Members gives the lines of the instances other collectors of a
	// cluster serve, which the stale and half-open rules read beside the
	// live feed's (see Members); nil = none (one collector).
	Members Members
}

// DefaultPendingGrace is Config.PendingGrace's default: more than a lost
// leader takes to notice (cluster.Config.LeaderCheck, 1 s by default, and
// its ping).
const DefaultPendingGrace = 3 * time.Second

// MarkName names the Service's mark in the store (Store.LeaderMark).
const MarkName = "alerts"

// DefaultReplayMargin is Config.Margin's default. A replay is idempotent, so a
// wide margin costs reads only.
const DefaultReplayMargin = time.Minute

// CatchUp is how long after a takeover Run replays the stored trips once
// more: the collector publishes a transition on the live feed before its
// store commits it, so one published before the takeover subscribed and
// committed after it read the store reaches neither; more than a store
// commit takes.
const CatchUp = 3 * time.Second

// markEvery is how often the mark is stored while the Service runs.
const markEvery = 5 * time.Second

func (c Config) validate() error {
	switch {
	case c.Source == nil:
		return fmt.Errorf("%w: Source is required", ErrInvalidConfig)
	case c.Store == nil:
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	case c.Interval < 0:
		return fmt.Errorf("%w: Interval is negative", ErrInvalidConfig)
	case c.QueueSize < 0:
		return fmt.Errorf("%w: QueueSize is negative", ErrInvalidConfig)
	case c.Margin < 0:
		return fmt.Errorf("%w: Margin is negative", ErrInvalidConfig)
	case c.PendingGrace < 0:
		return fmt.Errorf("%w: PendingGrace is negative", ErrInvalidConfig)
	}
	return nil
}

// Service evaluates alert rules against the collector's live state and
// delivers notifications. Its methods are safe for concurrent use; Run
// may be called again after it returned (a collector that leads again),
// and each Run starts from the store.
type Service struct {
	cfg     Config
	deliver *Deliverer
	tester  *Deliverer // one attempt: test notifications answer at once
	dropped atomic.Int64

	qmu    sync.Mutex                  // guards queues and fired
	queues map[int64]chan Notification // by rule ID, each drained by its own goroutine
	fired  map[alertKey]time.Time      // the start of each firing this Run queued, until its resolve
	muted  map[alertKey]time.Time      // the start of each firing a silence held back, until sent or resolved

	mu     sync.Mutex // guards engine and acks
	engine *Engine
	acks   map[alertKey]ack

	marked time.Time // when the mark was last stored; Run's goroutine only
	// catchUp is when Run replays the stored trips once more (CatchUp
	// after the takeover), zero once done; replaySince is from when.
	// Run's goroutine only.
	catchUp, replaySince time.Time
	// fallbacksRead is when the store's fallback history was last read
	// for this Run (zero: not yet; fallbacksLoaded once it succeeded).
	// Run's goroutine only.
	fallbacksRead   time.Time
	fallbacksLoaded bool
	// membersRead is when Members was last read (readMembers); Run's
	// goroutine only.
	membersRead time.Time
}

// New returns a Service, or an error wrapping ErrInvalidConfig naming the
// bad field.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrSystem(cfg.Clock)
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 64
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultReplayMargin
	}
	if cfg.PendingGrace == 0 {
		cfg.PendingGrace = DefaultPendingGrace
	}
	if cfg.Delivery.Logger == nil {
		cfg.Delivery.Logger = cfg.Logger
	}
	if cfg.Delivery.Clock == nil {
		cfg.Delivery.Clock = cfg.Clock
	}
	if cfg.Delivery.ExternalURL == "" {
		cfg.Delivery.ExternalURL = cfg.ExternalURL
	}
	d, err := NewDeliverer(cfg.Delivery, cfg.Store)
	if err != nil {
		return nil, err
	}
	once := cfg.Delivery
	once.Attempts = 1
	tester, err := NewDeliverer(once, cfg.Store)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, deliver: d, tester: tester, queues: make(map[int64]chan Notification), fired: make(map[alertKey]time.Time),
		muted: make(map[alertKey]time.Time), engine: NewEngine(), acks: make(map[alertKey]ack)}, nil
}

// Reload reads the rules from the store into the engine. The API calls it
// after every change to the rules.
func (s *Service) Reload(ctx context.Context) error {
	rules, err := s.cfg.Store.AlertRules(ctx)
	if err != nil {
		return fmt.Errorf("alert: load rules: %w", err)
	}
	s.mu.Lock()
	s.engine.SetRules(rules)
	s.mu.Unlock()
	return s.forgetInactive(ctx, rules)
}

// Dropped counts notifications dropped because their rule's delivery
// queue was full.
func (s *Service) Dropped() int64 { return s.dropped.Load() }

// Firing returns the subjects firing now per rule ID.
func (s *Service) Firing() map[int64][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engine.Firing()
}

// Run loads the rules and the alerts that were firing (from the store),
// queues the notifications whose delivery had not completed, subscribes to
// the source and evaluates until ctx is done; then it stops delivering (a
// delivery in progress is abandoned and logged, and sent again by the next
// Run) and returns nil once every rule's delivery goroutine has ended. It
// returns an error only when the rules or the alert state cannot be loaded
// at start (a ctx done while loading is a clean stop, nil).
//
// A takeover (a leader handover or a restart: same rule) also replays the
// stored transitions to open received after the Service's mark (MarkName,
// less Margin) through Engine.Trip before it follows the live feed, so a
// trip that opened and closed while no leader ran fires its alert (since
// the trip's time) and the resolve follows after the rule's hold. The
// store makes it exactly once: a firing is recorded only when the alert
// is not firing already and its start is not within an episode that
// resolved (Store.ClaimFiringAlert), a resolve only once
// (Store.ResolveFiringAlert); what is not recorded is not sent. CatchUp
// after the takeover the stored trips are replayed once more (see
// CatchUp). While it runs, Run stores the mark every 5 s.
func (s *Service) Run(ctx context.Context) error {
	// A Run after another (this collector leads again) starts from the
	// store, not from what the last one left.
	s.mu.Lock()
	s.engine = NewEngine()
	s.mu.Unlock()
	s.fallbacksRead, s.fallbacksLoaded = time.Time{}, false
	s.membersRead = time.Time{}
	if err := s.Reload(ctx); err != nil {
		if ctx.Err() != nil { // stopped while starting: a clean stop
			return nil
		}
		return err
	}
	var wg sync.WaitGroup
	defer func() {
		// The delivery goroutines have ended: the next Run starts its
		// own. What was queued is pending in the store and sent again.
		s.qmu.Lock()
		clear(s.queues)
		clear(s.fired)
		clear(s.muted)
		s.qmu.Unlock()
	}()
	defer wg.Wait()
	pending, err := s.restore(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if len(pending) > 0 {
		wg.Go(func() { s.resend(ctx, &wg, pending) })
	}
	tick, stop := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer stop()
	first := true
	for {
		snapshot, events, cancel := s.cfg.Source.Subscribe()
		s.mu.Lock()
		s.engine.Load(snapshot)
		s.mu.Unlock()
		if first {
			first = false
			if err := s.replay(ctx, &wg); err != nil {
				cancel()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		resubscribe := s.consume(ctx, &wg, events, tick)
		cancel()
		if !resubscribe {
			return nil
		}
		s.cfg.Logger.Warn("alert: live feed dropped us; subscribing again")
	}
}

// consume handles events until ctx ends (false) or the feed closes (true).
func (s *Service) consume(ctx context.Context, wg *sync.WaitGroup, events <-chan cbdash.Event, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				return true
			}
			s.mu.Lock()
			s.engine.Observe(ev)
			var ns []Notification
			if ev.Kind == cbdash.EventTransition && ev.Transition != nil {
				ns = s.engine.Trip(*ev.Transition)
			}
			s.mu.Unlock()
			s.send(ctx, wg, ns)
			if ev.Kind == cbdash.EventTransition && ev.Transition != nil && ev.Transition.To == protocol.StateOpen {
				s.evaluate(ctx, wg)
			}
		case <-tick:
			if !s.catchUp.IsZero() && !s.cfg.Clock.Now().Before(s.catchUp) {
				s.catchUp = time.Time{}
				if err := s.replayTrips(ctx, wg, s.replaySince); err != nil && ctx.Err() == nil {
					s.cfg.Logger.Error("alert: read the trips stored at the takeover", "err", err)
				}
			}
			s.loadFallbacks(ctx)
			s.readMembers(ctx)
			s.evaluate(ctx, wg)
			s.unmute(ctx, func(n Notification) { s.enqueue(ctx, wg, n) })
			if now := s.cfg.Clock.Now(); now.Sub(s.marked) >= markEvery {
				s.refreshAcks(ctx)
				s.mark(ctx, now)
			}
		}
	}
}

// loadFallbacks gives the engine the store's fallback history once per
// Run, when a fallback_unexercised rule is enabled (read again a minute
// after a failure; the live state keeps it up to date after).
func (s *Service) loadFallbacks(ctx context.Context) {
	now := s.cfg.Clock.Now()
	if s.fallbacksLoaded || (!s.fallbacksRead.IsZero() && now.Sub(s.fallbacksRead) < time.Minute) {
		return
	}
	s.mu.Lock()
	watch := s.engine.WatchesFallbacks()
	s.mu.Unlock()
	if !watch {
		return
	}
	s.fallbacksRead = now
	fs, err := s.cfg.Store.FallbackFreshness(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: read when the fallbacks last ran", "err", err)
		}
		return
	}
	s.mu.Lock()
	s.engine.LoadFallbacks(fs)
	s.mu.Unlock()
	s.fallbacksLoaded = true
}

// evaluate evaluates every rule, records what fires or resolves (so a
// restart neither repeats nor loses it) and queues the notifications, each
// to its rule's queue (started in wg on first use).
func (s *Service) evaluate(ctx context.Context, wg *sync.WaitGroup) {
	s.mu.Lock()
	ns := s.engine.Evaluate(s.cfg.Clock.Now())
	s.mu.Unlock()
	s.send(ctx, wg, ns)
}

// send records and queues the notifications the store has not seen.
func (s *Service) send(ctx context.Context, wg *sync.WaitGroup, ns []Notification) {
	for _, n := range ns {
		send, before := s.persist(ctx, n)
		if before != nil {
			s.enqueue(ctx, wg, *before)
		}
		if send {
			s.enqueue(ctx, wg, n)
		}
	}
}

// resend queues again, after PendingGrace, the notifications of pending
// (restored at the start of Run) whose alert is still pending that event
// with that start in the store.
func (s *Service) resend(ctx context.Context, wg *sync.WaitGroup, pending []Notification) {
	t := clock.NewTimer(s.cfg.Clock, s.cfg.PendingGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	kept, err := s.cfg.Store.FiringAlerts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: read the undelivered notifications", "err", err)
		}
		return
	}
	for _, n := range pending {
		if slices.ContainsFunc(kept, func(a cbdash.FiringAlert) bool { return stillPending(a, n) }) {
			s.enqueue(ctx, wg, n)
		}
	}
}

// stillPending reports whether kept state a still has n to send: its
// pending event with the same start, or, for a flapping message, the
// flapping message of the alert still firing with that start (and not
// acknowledged meanwhile: an acknowledged alert sends none).
func stillPending(a cbdash.FiringAlert, n Notification) bool {
	if a.RuleID != n.Rule.ID || a.Subject != n.Subject || !a.Since.Equal(n.Since) {
		return false
	}
	if n.Event == cbdash.AlertFlapping {
		return a.Firing && a.FlappingPending && a.AckedAt.IsZero()
	}
	return a.Pending == n.Event
}

// replay feeds the engine the stored trips received after the mark (see
// Run), sends what they fire, and stores the mark.
func (s *Service) replay(ctx context.Context, wg *sync.WaitGroup) error {
	now := s.cfg.Clock.Now()
	mark, ok, err := s.cfg.Store.LeaderMark(ctx, MarkName)
	if err != nil {
		return fmt.Errorf("alert: read the mark: %w", err)
	}
	s.catchUp, s.replaySince = time.Time{}, time.Time{}
	if ok {
		s.replaySince = mark.Add(-s.cfg.Margin)
		if err := s.replayTrips(ctx, wg, s.replaySince); err != nil {
			return err
		}
		s.catchUp = now.Add(CatchUp)
	}
	s.mark(ctx, now)
	return nil
}

// replayTrips feeds the engine the stored trips received since since and
// sends what they fire. A trip seen already fires nothing (Engine.Trip,
// and the store's claims).
func (s *Service) replayTrips(ctx context.Context, wg *sync.WaitGroup, since time.Time) error {
	trs, err := s.cfg.Store.TransitionsReceivedSince(ctx, since, 0)
	if err != nil {
		return fmt.Errorf("alert: read the transitions after the mark: %w", err)
	}
	for _, tr := range trs {
		s.mu.Lock()
		ns := s.engine.Trip(tr)
		s.mu.Unlock()
		s.send(ctx, wg, ns)
	}
	return nil
}

// mark stores how far the Service has processed the transitions: the
// ones received before now are processed or waiting in the live feed
// (Margin covers those).
func (s *Service) mark(ctx context.Context, now time.Time) {
	if err := s.cfg.Store.SetLeaderMark(ctx, MarkName, now); err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: store the mark", "err", err)
		}
		return
	}
	s.marked = now
}

// enqueue hands n to its rule's delivery queue, or drops and counts it
// when the queue is full (its state stays pending in the store: the next
// Run sends it).
func (s *Service) enqueue(ctx context.Context, wg *sync.WaitGroup, n Notification) {
	if n.Event == cbdash.AlertFiring {
		s.qmu.Lock()
		s.fired[alertKey{n.Rule.ID, n.Subject}] = n.Since
		s.qmu.Unlock()
	}
	select {
	case s.queueOf(ctx, wg, n.Rule.ID) <- n:
	default:
		s.dropped.Add(1)
		s.cfg.Logger.Error("alert: delivery queue full, notification dropped", "rule", n.Rule.ID, "subject", n.Subject, "event", n.Event)
	}
}

// queueOf returns rule id's delivery queue, starting its goroutine in wg
// the first time.
func (s *Service) queueOf(ctx context.Context, wg *sync.WaitGroup, id int64) chan<- Notification {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	q, ok := s.queues[id]
	if !ok {
		q = make(chan Notification, s.cfg.QueueSize)
		s.queues[id] = q
		wg.Go(func() { s.deliverLoop(ctx, q) })
	}
	return q
}

// held reports whether a silence (or the silence of its firing) holds
// n back; then it is logged and acknowledged, not sent.
func (s *Service) held(ctx context.Context, n Notification) bool {
	if s.mutedResolve(n) {
		s.logMuted(ctx, n, "its firing was silenced and never sent")
		s.ack(ctx, n)
		return true
	}
	sl, ok := s.silencedBy(ctx, n.Subject)
	if !ok {
		return false
	}
	s.mute(ctx, n, sl)
	s.ack(ctx, n)
	return true
}

// deliverLoop delivers one rule's notifications in order (a resolve never
// overtakes its alert) until ctx ends, recording each completed delivery.
// A grouped rule's firings and resolves wait in a grouper and go out in
// one message per group (see cbdash.AlertRule.GroupBy).
func (s *Service) deliverLoop(ctx context.Context, queue <-chan Notification) {
	g := newGrouper()
	t := clock.NewTimer(s.cfg.Clock, time.Hour)
	defer t.Stop()
	for {
		s.armGroups(g, t)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, b := range g.flush(s.cfg.Clock.Now()) {
				if !s.deliverOne(ctx, b.n, b.members...) {
					return
				}
			}
		case n := <-queue:
			if s.held(ctx, n) {
				continue
			}
			if grouped(n) {
				g.add(n, s.cfg.Clock.Now())
				continue
			}
			if g.holdFlapping(n) {
				continue
			}
			if !s.deliverOne(ctx, n, n) {
				return
			}
		}
	}
}

// armGroups arms t for the grouper's next message, or stops it.
func (s *Service) armGroups(g *grouper, t *clock.Timer) {
	if due, ok := g.next(); ok {
		t.Reset(max(due.Sub(s.cfg.Clock.Now()), 0))
		return
	}
	t.Stop()
}

// deliverOne delivers n and acknowledges the notifications it carries
// (n itself, or a group's members); false when ctx ended (then the
// loop ends: what was not acknowledged is sent again by the next Run).
func (s *Service) deliverOne(ctx context.Context, n Notification, acks ...Notification) bool {
	n.Incident = s.incidentOf(ctx, n)
	entry, err := s.deliver.Deliver(ctx, n)
	if entry.OK && ctx.Err() != nil {
		// Delivered as the Run stopped: acknowledged all the same, or
		// the next leader would send it again.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		for _, a := range acks {
			s.ack(actx, a)
		}
		cancel()
		return false
	}
	if ctx.Err() != nil {
		return false // not acknowledged: the next Run sends it again
	}
	if err != nil {
		s.cfg.Logger.Error("alert: delivery", "err", err)
	}
	for _, a := range acks {
		s.ack(ctx, a)
	}
	return true
}

// incidentOf returns the incident of the open n is about, once one
// exists: for an open rule's message about one dependency, with an
// external URL to link to, the newest incident of that dependency that
// overlaps the alert (from its start to n). 0 otherwise, and when the
// store fails (the message goes without the link).
func (s *Service) incidentOf(ctx context.Context, n Notification) int64 {
	svc, br, ok := strings.Cut(n.Subject, "/")
	if s.cfg.ExternalURL == "" || n.Rule.Kind != cbdash.AlertOpen || !ok || svc == "*" || br == "*" {
		return 0
	}
	incs, err := s.cfg.Store.Incidents(ctx, cbdash.IncidentQuery{Service: svc, Breaker: br, From: n.Since, To: n.At.Add(time.Millisecond), Limit: 1})
	if err != nil || len(incs) == 0 {
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("alert: find the incident to link to", "subject", n.Subject, "err", err)
		}
		return 0
	}
	return incs[0].ID
}
