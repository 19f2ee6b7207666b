package incident

import (
	"context"
	"fmt"
	"log/slog"
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
}

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
	}
	return c.Detector.validate()
}

// Service runs a Detector against the collector's live feed and stores
// the incidents it finds. Run must be called once; the other methods are
// safe for concurrent use.
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
	det, err := NewDetector(cfg.Detector)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, det: det, cfw: newConfigWatch(), dirty: make(map[int64]cbdash.Incident)}, nil
}

// Store returns the store the Service writes to.
func (s *Service) Store() Store { return s.cfg.Store }

// Run restores the open incidents, subscribes to the live feed and detects
// until ctx is done; it then returns nil. Storage errors are logged, not
// returned: detection goes on. It returns an error only when the open
// incidents cannot be read at start.
func (s *Service) Run(ctx context.Context) error {
	open, err := s.cfg.Store.Incidents(ctx, cbdash.IncidentQuery{OpenOnly: true, Limit: 10000})
	if err != nil {
		return fmt.Errorf("incident: restore open incidents: %w", err)
	}
	tick, stop := s.cfg.Clock.NewTicker(s.cfg.Tick)
	defer stop()
	first := true
	for {
		snapshot, events, cancel := s.cfg.Source.Subscribe()
		var missed []Change
		s.mu.Lock()
		if first {
			s.det.Restore(snapshot, open, s.cfg.Clock.Now())
			first = false
		} else {
			missed = s.det.Resync(snapshot, s.cfg.Clock.Now())
		}
		s.mu.Unlock()
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
			s.mu.Lock()
			cs := s.det.Tick(s.cfg.Clock.Now())
			s.mu.Unlock()
			s.persist(ctx, cs)
		}
	}
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
func (s *Service) persist(ctx context.Context, cs []Change) {
	for _, c := range cs {
		id := c.Incident.ID
		if c.Kind == Updated && id != 0 {
			s.dirty[id] = c.Incident
			continue
		}
		delete(s.dirty, id) // a closed incident carries the latest state
		s.store(ctx, c)
	}
}

func (s *Service) store(ctx context.Context, c Change) {
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
		return
	}
	level := slog.LevelInfo
	if c.Kind == Updated {
		level = slog.LevelDebug
	}
	s.cfg.Logger.Log(ctx, level, "incident "+c.Kind.String(), "id", inc.ID, "dependency", inc.DependencyKey.String(), "instances", inc.Instances)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(Change{Kind: c.Kind, Incident: inc})
	}
}

// Open returns the incidents open now, as the detector sees them.
func (s *Service) Open() []cbdash.Incident {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.det.Open()
}
