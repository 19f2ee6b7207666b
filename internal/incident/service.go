package incident

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
)

// Source is the collector's live feed: a snapshot and the events after it.
// *collector.Collector implements it.
type Source interface {
	Subscribe() (snapshot []cbdash.Dependency, events <-chan cbdash.Event, cancel func())
}

// Store keeps incidents and reads what their reports need. *store.Store
// implements it.
type Store interface {
	Reader
	CreateIncident(ctx context.Context, inc cbdash.Incident) (int64, error)
	UpdateIncident(ctx context.Context, inc cbdash.Incident) error
	Incident(ctx context.Context, id int64) (cbdash.Incident, error)
	Incidents(ctx context.Context, q cbdash.IncidentQuery) ([]cbdash.Incident, error)
	AddIncidentNote(ctx context.Context, n cbdash.IncidentNote) (cbdash.IncidentNote, error)
	SaveConfigChange(ctx context.Context, c cbdash.ConfigChange) (int64, error)
	// The handover (see Service.Run).
	LeaderMark(ctx context.Context, name string) (time.Time, bool, error)
	SetLeaderMark(ctx context.Context, name string, at time.Time) error
	TransitionsReceivedSince(ctx context.Context, since time.Time, limit int) ([]cbdash.TransitionRecord, error)
}

// MarkName names the Service's mark in the store (Store.LeaderMark).
const MarkName = "incidents"

// DefaultMargin is ServiceConfig.Margin's default: how far before the
// stored mark a takeover replays. A replay is idempotent, so a wide margin
// costs reads only.
const DefaultMargin = time.Minute

// CatchUp is how long after a takeover Run reads the stored transitions
// once more, for those committed after it read them but published on the
// live feed before it subscribed: more than a store commit takes.
const CatchUp = 3 * time.Second

// markEvery is how often the mark is stored while the Service runs.
const markEvery = 5 * time.Second

// ServiceConfig wires a Service. Source and Store are required; the rest
// has working zero values.
type ServiceConfig struct {
	Detector Config
	Source   Source
	Store    Store
	Logger   *slog.Logger // nil = discard
	// Clock is the time of quiet periods and of the Tick loop; nil =
	// clock.System(). The server passes its one clock.
	Clock clock.Clock
	// Tick is how often quiet periods are checked (0 = 1 s).
	Tick time.Duration
	// Margin is how far before the stored mark Run replays the stored
	// transitions (0 = DefaultMargin): it covers transitions received
	// before the mark but not yet processed by the previous leader (a
	// backlog in its live feed, a transaction that committed late, the
	// collectors' clocks apart).
	Margin time.Duration
	// OnChange, when set, is called (from Run's goroutine, after the
	// change is stored) for every incident change, e.g. to refresh a live
	// page. It must not block. Updates of open incidents are coalesced and
	// stored once per Tick.
	OnChange func(Change)
}

func (c ServiceConfig) validate() error {
	switch {
	case c.Source == nil:
		return fmt.Errorf("%w: Source is required", ErrInvalidConfig)
	case c.Store == nil:
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	case c.Tick < 0:
		return fmt.Errorf("%w: Tick is negative", ErrInvalidConfig)
	case c.Margin < 0:
		return fmt.Errorf("%w: Margin is negative", ErrInvalidConfig)
	}
	return c.Detector.validate()
}

// Service runs a Detector against the collector's live feed and stores
// the incidents it finds. Run may be called again after it returned (a
// collector that leads again): each Run starts from the store. The other
// methods are safe for concurrent use.
type Service struct {
	cfg ServiceConfig
	mu  sync.Mutex // guards det
	det *Detector
	cfw *configWatch // used by Run's goroutine only
	// dirty holds updates of open incidents not stored yet, by ID: they
	// are written once per tick, so that a storm of transitions makes one
	// write per incident and tick, not one per transition. Run's goroutine
	// only.
	dirty map[int64]cbdash.Incident
	// replayed holds the transitions Run replayed from the store or
	// observed live since the takeover, so that none is observed twice;
	// forgotten once Margin has passed (Run's goroutine only). latest is
	// the time of the newest of them per instance breaker.
	replayed     map[trKey]bool
	latest       map[trKey]int64  // by service, instance, breaker
	latestTo     map[trKey]string // the state the newest one left
	replayedTill time.Time
	// catchUp is when Run reads the stored transitions once more
	// (CatchUp after the takeover); replaySince is from when. Zero once
	// done.
	catchUp, replaySince time.Time
	marked               time.Time // when the mark was last stored
}

// trKey identifies a transition on the live feed (which carries no store
// ID) and in the store.
type trKey struct {
	service, instance, breaker, to string
	at                             int64
	gen                            uint64
}

func keyOf(tr *cbdash.TransitionRecord) trKey {
	return trKey{tr.Service, tr.Instance, tr.Breaker, tr.To, tr.At, tr.Generation}
}

// NewService returns a Service, or an error wrapping ErrInvalidConfig
// naming the bad field.
func NewService(cfg ServiceConfig) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrSystem(cfg.Clock)
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	det, err := NewDetector(cfg.Detector)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, det: det, cfw: newConfigWatch(), dirty: make(map[int64]cbdash.Incident)}, nil
}

// Store returns the store the Service writes to.
func (s *Service) Store() Store { return s.cfg.Store }

// Run takes over incident detection, subscribes to the live feed and
// detects until ctx is done; it then returns nil. Storage errors are
// logged, not returned: detection goes on. It returns an error only when
// what the takeover reads cannot be read at start.
//
// The takeover (a leader handover or a restart: same rule) works from the
// store, not from what the previous leader kept in memory: it reads the
// incidents the store holds open, every stored transition of their
// dependencies since their start, and the stored transitions received
// after the Service's mark (MarkName, less Margin), and resumes the
// Detector from them (Detector.Resume) before it follows the live feed.
// Trips that opened and closed while no leader ran get their incident, and
// an incident's end is the stored close of its last instance, not the
// takeover. The replay is idempotent: trips within an incident the store
// holds closed are passed over, the store keeps one incident per
// dependency and start (a second create returns the stored one), and the
// replayed transitions are not observed again from the live feed. The
// collector publishes a transition on the live feed before its store
// commits it, so CatchUp after the takeover Run reads the stored
// transitions once more and observes those it has seen neither way. While
// it runs, Run stores the mark every 5 s.
func (s *Service) Run(ctx context.Context) error {
	tick, stop := s.cfg.Clock.NewTicker(s.cfg.Tick)
	defer stop()
	first := true
	for {
		snapshot, events, cancel := s.cfg.Source.Subscribe()
		var missed []Change
		if first {
			// A Run after another (this collector leads again) starts
			// from the store, not from what the last one left.
			det, err := NewDetector(s.cfg.Detector)
			if err != nil {
				cancel()
				return err
			}
			s.mu.Lock()
			s.det = det
			s.mu.Unlock()
			clear(s.dirty)
			now := s.cfg.Clock.Now()
			open, stored, err := s.takeover(ctx)
			if err != nil {
				cancel()
				if ctx.Err() != nil {
					return nil // stopped while taking over: a clean stop
				}
				return err
			}
			s.mu.Lock()
			missed = s.det.Resume(open, stored, snapshot, now)
			s.mu.Unlock()
			s.cfg.Logger.Info("incident: took over", "open", len(open), "replayed", len(stored), "changes", len(missed), "since", s.replaySince)
			s.replayed, s.replayedTill = make(map[trKey]bool, len(stored)), now.Add(s.cfg.Margin)
			s.latest, s.latestTo = make(map[trKey]int64), make(map[trKey]string)
			for i := range stored {
				s.see(&stored[i])
			}
			s.catchUp = now.Add(CatchUp)
			s.persist(ctx, missed)
			s.mark(ctx, now)
			first = false
			missed = nil
		} else {
			s.mu.Lock()
			missed = s.det.Resync(snapshot, s.cfg.Clock.Now())
			s.mu.Unlock()
		}
		s.persist(ctx, missed)
		again := s.consume(ctx, events, tick)
		cancel()
		if !again {
			// Store what is pending even though ctx is done.
			fctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.flush(fctx)
			done()
			return nil
		}
		s.cfg.Logger.Warn("incident: live feed dropped us; subscribing again")
	}
}

func (s *Service) consume(ctx context.Context, events <-chan cbdash.Event, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				return true
			}
			if ev.Kind == cbdash.EventTransition && ev.Transition != nil && s.replayed != nil {
				if s.replayed[keyOf(ev.Transition)] {
					continue // replayed from the store at the takeover
				}
				s.see(ev.Transition)
			}
			s.mu.Lock()
			cs := s.det.Observe(ev)
			s.mu.Unlock()
			s.persist(ctx, cs)
			for _, cc := range s.cfw.observe(ev) {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second) // as in store
				_, err := s.cfg.Store.SaveConfigChange(wctx, cc)
				cancel()
				if err != nil {
					s.cfg.Logger.Error("incident: store config change", "dependency", cc.DependencyKey.String(), "instance", cc.Instance, "err", err)
				}
			}
		case <-tick:
			s.flush(ctx)
			now := s.cfg.Clock.Now()
			s.mu.Lock()
			cs := s.det.Tick(now)
			s.mu.Unlock()
			s.persist(ctx, cs)
			if !s.catchUp.IsZero() && !now.Before(s.catchUp) {
				s.catchUpStored(ctx)
			}
			if s.replayed != nil && !now.Before(s.replayedTill) {
				s.replayed, s.latest, s.latestTo = nil, nil, nil
			}
			if now.Sub(s.marked) >= markEvery {
				s.mark(ctx, now)
			}
		}
	}
}

// see records tr as observed since the takeover.
func (s *Service) see(tr *cbdash.TransitionRecord) {
	s.replayed[keyOf(tr)] = true
	ik := trKey{service: tr.Service, instance: tr.Instance, breaker: tr.Breaker}
	if at, ok := s.latest[ik]; !ok || tr.At >= at {
		s.latest[ik], s.latestTo[ik] = tr.At, tr.To
	}
}

// catchUpStored observes the stored transitions received since the
// takeover's replay began that were neither replayed nor seen live: the
// collector publishes a transition before its store commits it, so one
// published before the takeover subscribed and committed after it read
// the store reaches neither (issue 28). They go to Detector.Late with the
// closes seen after them; trips within an incident the store holds
// closed are passed over.
func (s *Service) catchUpStored(ctx context.Context) {
	since := s.replaySince
	s.catchUp = time.Time{}
	if s.replayed == nil || since.IsZero() {
		return
	}
	trs, err := s.cfg.Store.TransitionsReceivedSince(ctx, since, 0)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("incident: read the transitions stored at the takeover", "err", err)
		}
		return
	}
	s.cfg.Logger.Debug("incident: catching up with the store", "stored", len(trs), "seen", len(s.replayed))
	// The missed transitions, and the closes seen after the first missed
	// one of their instance breaker (fed again: the state they leave is
	// the instance's).
	first := make(map[trKey]int64)
	var missed []cbdash.TransitionRecord
	for i := range trs {
		tr := &trs[i]
		if s.replayed[keyOf(tr)] {
			continue
		}
		missed = append(missed, *tr)
		ik := trKey{service: tr.Service, instance: tr.Instance, breaker: tr.Breaker}
		if at, ok := first[ik]; !ok || tr.At < at {
			first[ik] = tr.At
		}
	}
	if len(missed) == 0 {
		return
	}
	var late []cbdash.TransitionRecord
	for i := range trs {
		tr := &trs[i]
		at, ok := first[trKey{service: tr.Service, instance: tr.Instance, breaker: tr.Breaker}]
		if ok && tr.At >= at && (!s.replayed[keyOf(tr)] || !down(tr.To)) {
			late = append(late, *tr)
		}
	}
	l, err := s.cfg.Store.Incidents(ctx, cbdash.IncidentQuery{From: time.UnixMilli(missed[0].At), Limit: 10000})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("incident: read the incidents stored at the takeover", "err", err)
		}
		return
	}
	closed := closedOf(l)
	lastFed := make(map[trKey]int64)
	for _, tr := range late {
		ik := trKey{service: tr.Service, instance: tr.Instance, breaker: tr.Breaker}
		lastFed[ik] = max(lastFed[ik], tr.At)
	}
	// What was seen before the catch-up decides which instances stay down.
	latestTo, latestAt := make(map[trKey]string, len(s.latestTo)), make(map[trKey]int64, len(s.latest))
	for k, v := range s.latestTo {
		latestTo[k], latestAt[k] = v, s.latest[k]
	}
	feed := late[:0]
	for i := range late {
		tr := &late[i]
		if !s.replayed[keyOf(tr)] {
			s.cfg.Logger.Info("incident: a transition stored at the takeover, observed late", "dependency", tr.Service+"/"+tr.Breaker, "instance", tr.Instance, "to", tr.To)
		}
		s.see(tr)
		if !down(tr.To) || !closed.within(*tr) {
			feed = append(feed, *tr)
		}
	}
	s.mu.Lock()
	cs := s.det.Late(feed, func(service, instance, breaker string) bool {
		ik := trKey{service: service, instance: instance, breaker: breaker}
		return down(latestTo[ik]) && latestAt[ik] > lastFed[ik]
	})
	s.mu.Unlock()
	s.persist(ctx, cs)
}

// takeover reads what Resume needs: the incidents the store holds open and
// the stored transitions to replay, oldest first (see Run).
func (s *Service) takeover(ctx context.Context) ([]cbdash.Incident, []cbdash.TransitionRecord, error) {
	open, err := s.cfg.Store.Incidents(ctx, cbdash.IncidentQuery{OpenOnly: true, Limit: 10000})
	if err != nil {
		return nil, nil, fmt.Errorf("incident: restore open incidents: %w", err)
	}
	mark, ok, err := s.cfg.Store.LeaderMark(ctx, MarkName)
	if err != nil {
		return nil, nil, fmt.Errorf("incident: read the mark: %w", err)
	}
	var stored []cbdash.TransitionRecord
	s.replaySince = time.Time{}
	if ok {
		s.replaySince = mark.Add(-s.cfg.Margin)
		stored, err = s.cfg.Store.TransitionsReceivedSince(ctx, s.replaySince, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("incident: read the transitions after the mark: %w", err)
		}
	}
	for _, inc := range open {
		trs, err := s.cfg.Store.Transitions(ctx, cbdash.TransitionQuery{Service: inc.Service, Breaker: inc.Breaker, From: inc.Start, Limit: 10000})
		if err != nil {
			return nil, nil, fmt.Errorf("incident: read the transitions of open incident %d: %w", inc.ID, err)
		}
		stored = append(stored, trs...)
	}
	slices.SortFunc(stored, func(a, b cbdash.TransitionRecord) int {
		if a.At != b.At {
			return cmp.Compare(a.At, b.At)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	stored = slices.CompactFunc(stored, func(a, b cbdash.TransitionRecord) bool { return a.ID == b.ID })
	if len(stored) == 0 {
		return open, stored, nil
	}
	// Trips within an incident the store holds closed were processed.
	l, err := s.cfg.Store.Incidents(ctx, cbdash.IncidentQuery{From: time.UnixMilli(stored[0].At), Limit: 10000})
	if err != nil {
		return nil, nil, fmt.Errorf("incident: read the incidents after the mark: %w", err)
	}
	closed := closedOf(l)
	out := stored[:0]
	for _, tr := range stored {
		if !down(tr.To) || !closed.within(tr) {
			out = append(out, tr)
		}
	}
	return open, out, nil
}

// closedSpans indexes the closed incidents of l by dependency, so that a
// replay of many transitions asks only its own dependency's.
type closedSpans map[cbdash.DependencyKey][]cbdash.Incident

func closedOf(l []cbdash.Incident) closedSpans {
	out := make(closedSpans)
	for _, inc := range l {
		if !inc.Open {
			out[inc.DependencyKey] = append(out[inc.DependencyKey], inc)
		}
	}
	return out
}

// within reports whether tr is within one of the closed incidents of its
// dependency: between its start and its end.
func (c closedSpans) within(tr cbdash.TransitionRecord) bool {
	for _, inc := range c[cbdash.DependencyKey{Service: tr.Service, Breaker: tr.Breaker}] {
		if tr.At >= inc.Start.UnixMilli() && tr.At <= inc.End.UnixMilli() {
			return true
		}
	}
	return false
}

// mark stores how far the Service has processed the transitions: the
// ones received before now are processed or waiting in the live feed
// (Margin covers those).
func (s *Service) mark(ctx context.Context, now time.Time) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.SetLeaderMark(wctx, MarkName, now); err != nil {
		s.cfg.Logger.Error("incident: store the mark", "err", err)
		return
	}
	s.marked = now
}

// flush stores the pending updates.
func (s *Service) flush(ctx context.Context) {
	for id, inc := range s.dirty {
		delete(s.dirty, id)
		s.store(ctx, Change{Kind: Updated, Incident: inc})
	}
}

// persist stores new and closed incidents at once and queues updates of
// stored ones for the next tick.
//
// Changes that follow the Opened of their incident in the same list (a
// replay yields thousands for one flapping dependency, all made before
// the first was stored) take the ID its creation got: they are queued or
// written as updates, not created one by one.
func (s *Service) persist(ctx context.Context, cs []Change) {
	type created struct {
		start time.Time
		id    int64
	}
	var made map[cbdash.DependencyKey]created
	for _, c := range cs {
		if c.Incident.ID == 0 {
			if m, ok := made[c.Incident.DependencyKey]; ok && m.start.Equal(c.Incident.Start) {
				c.Incident.ID = m.id
			}
		}
		id := c.Incident.ID
		if c.Kind == Updated && id != 0 {
			s.dirty[id] = c.Incident
			continue
		}
		delete(s.dirty, id) // a closed incident carries the latest state
		if got := s.store(ctx, c); id == 0 && got != 0 {
			if made == nil {
				made = make(map[cbdash.DependencyKey]created)
			}
			made[c.Incident.DependencyKey] = created{start: c.Incident.Start, id: got}
		}
	}
}

// store writes change c and returns the incident's ID (0 when the write
// failed, which it logs).
func (s *Service) store(ctx context.Context, c Change) int64 {
	// A write that has begun finishes even when shutdown cancels ctx
	// meanwhile: an incident's last update must not be lost (or logged as
	// an error) because the server is stopping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	inc := c.Incident
	var err error
	if inc.ID == 0 {
		var id int64
		id, err = s.cfg.Store.CreateIncident(ctx, inc)
		if err == nil {
			inc.ID = id
			if c.Kind != Opened {
				// Opened and changed before it was stored (a replay),
				// or stored already by another leader: write the state.
				err = s.cfg.Store.UpdateIncident(ctx, inc)
			}
		}
		if err == nil {
			if c.Kind != Closed {
				s.mu.Lock()
				s.det.SetID(inc.DependencyKey, id)
				s.mu.Unlock()
			}
		}
	} else {
		err = s.cfg.Store.UpdateIncident(ctx, inc)
	}
	if err != nil {
		s.cfg.Logger.Error("incident: store", "dependency", inc.DependencyKey.String(), "change", c.Kind.String(), "err", err)
		return 0
	}
	level := slog.LevelInfo
	if c.Kind == Updated {
		level = slog.LevelDebug
	}
	s.cfg.Logger.Log(ctx, level, "incident "+c.Kind.String(), "id", inc.ID, "dependency", inc.DependencyKey.String(), "instances", inc.Instances)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(Change{Kind: c.Kind, Incident: inc})
	}
	return inc.ID
}

// Open returns the incidents open now, as the detector sees them.
func (s *Service) Open() []cbdash.Incident {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.det.Open()
}
