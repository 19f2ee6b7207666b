package holds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Key names one instance: a service and an instance id.
type Key struct{ Service, Instance string }

// Instance is what applying holds needs of one instance of live state.
type Instance struct {
	Ref       cbdash.InstanceRef
	StartedAt int64    // the process's started_at (Unix ms) from its hello
	Breakers  []string // sorted
	// Rates is the calls per second of each breaker's last window report
	// (admitted and rejected calls over its period); absent when none.
	Rates map[string]float64
	// Unsupported says why a breaker cannot be held (its hello set
	// holds_unsupported); such a breaker is never sent a hold.
	Unsupported map[string]string
	// Last is the counts of each breaker's last window report; absent
	// when none (pre-flight reads it: a stop condition breached now).
	Last map[string]protocol.Counts
	// Conn is the agent process's connection; nil when it has none.
	Conn  Conn
	Stale bool // silent for the stale timeout
	// Elsewhere is set for an instance another collector serves
	// (Config.Elsewhere): no Conn, Rates or Last.
	Elsewhere bool
	// Pull is set for an instance that reports over HTTP ingest (no
	// Conn): what is sent to it is recorded as pending targets, which
	// its ingest response carries.
	Pull bool
}

// Reachable reports whether commands can be delivered to the instance now.
func (i Instance) Reachable() bool { return i.Conn != nil || i.Pull }

func (i Instance) key() Key { return Key{i.Ref.Service, i.Ref.Instance} }

// Instances is the instances of live state (connected or not). Its
// methods are called with Manager's lock held and must not call back into
// the Manager; they must be safe for concurrent use.
type Instances interface {
	// HoldInstances lists every instance served here (connected here,
	// on HTTP ingest here, or known here and away), sorted by service
	// then instance: in a cluster, not those other collectors serve
	// (Elsewhere).
	HoldInstances() []Instance
	// HoldInstance returns one instance; ok is false when it is unknown.
	HoldInstance(k Key) (inst Instance, ok bool)
}

// Conn delivers a command, already recorded in the store, to one
// connected agent process. Deliver must not block (a connection whose
// queue is full may end).
type Conn interface {
	Deliver(cmd cbdash.Command, now time.Time)
}

// Store is what the Manager reads and writes: holds, their coverage and
// statistics, the commands holds are sent as, and history for reports.
// Errors are the store's (cbdash.ErrNotFound for an unknown id,
// cbdash.ErrConflict for a command id already stored or a hold already
// released or expired).
type Store interface {
	CreateHold(ctx context.Context, h cbdash.HoldRecord) error
	ReleaseHold(ctx context.Context, id string, at time.Time, by, reason string) (cbdash.HoldRecord, error)
	// StopHold releases hold id at b.At for b.Reason(), recording b.
	StopHold(ctx context.Context, id, by string, b cbdash.HoldBreach) (cbdash.HoldRecord, error)
	Hold(ctx context.Context, id string) (cbdash.HoldRecord, error)
	Holds(ctx context.Context, q cbdash.HoldQuery) ([]cbdash.HoldRecord, error)
	AddHoldCoverage(ctx context.Context, holdID string, c cbdash.HoldCoverage) error
	// ApplyHold records deliveries in one write, all or none (see the
	// store's): ErrInvalid or ErrNotFound as CreateCommand,
	// SetCommandTarget and AddHoldCoverage.
	ApplyHold(ctx context.Context, deliveries []cbdash.HoldDelivery) error
	// SaveHoldStats replaces collector's rows of hold holdID's counts
	// (its running totals); HoldStatsByCollector reads them back by
	// collector (see the store's).
	SaveHoldStats(ctx context.Context, holdID, collector string, stats []cbdash.HoldCounts) error
	HoldStatsByCollector(ctx context.Context, holdID string) (map[string][]cbdash.HoldCounts, error)
	CreateCommand(ctx context.Context, c cbdash.Command) error
	SetCommandTarget(ctx context.Context, commandID string, t cbdash.CommandTarget) error
	Command(ctx context.Context, id string) (cbdash.Command, error)
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
	// Incidents lists incidents (pre-flight reads the open ones).
	Incidents(ctx context.Context, q cbdash.IncidentQuery) ([]cbdash.Incident, error)
}

// Events publishes a change (a command recorded or targeted) to live
// subscribers; Publish must not block.
type Events interface {
	Publish(e cbdash.Event)
}

// Cluster tells the other collectors of a cluster that hold id was
// created or released, so that they apply it to the instances connected
// to them (see Manager.Adopt).
type Cluster interface {
	HoldChanged(ctx context.Context, id string)
}

// Config is what a Manager is built from. Every field is required except
// Elsewhere, Log (nil = slog.Default()) and MaxHold (0 =
// cbdash.DefaultMaxHold).
type Config struct {
	Instances Instances
	// Elsewhere is what this collector knows of the instances other
	// collectors of its cluster serve (Plan, pre-flight and the refusal
	// of breakers that cannot be held count them); nil = none (one
	// collector).
	Elsewhere Elsewhere
	Store     Store
	Events    Events
	Cluster   Cluster
	Now       func() time.Time
	Log       *slog.Logger
	// MaxHold is the longest hold accepted (a longer ttl is refused).
	MaxHold time.Duration
	// CommandDelivery is how long a release command may be delivered.
	CommandDelivery time.Duration
	// DefaultStops is the stop conditions every hold gets unless it drops
	// them (cbdash serve --stop-if); nil = none.
	DefaultStops []cbdash.StopCondition
	// Collector names this collector's rows of hold statistics (its
	// cluster node id): each collector saves what it counted under its own
	// name, and reports sum every collector's (an instance may move to
	// another collector mid-hold). "" is a name too (one collector).
	Collector string
}

// Manager owns the live holds and what was applied where. Create it with
// New; all its methods are safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	seq   atomic.Uint64 // the sequence in hold ids (newHoldID)
	turns turns         // one instance's work at a time
	// changing is held by the change of holds being applied (Create,
	// Release, Adopt, Sweep): changes take effect one at a time, in
	// order, as they did under one lock. Hellos, ingests and reads never
	// take it.
	changing chan struct{}

	// mu guards the maps below; it is never held across I/O.
	mu      sync.Mutex
	gen     uint64                         // counts changes of holds
	holds   map[string]cbdash.HoldRecord   // not yet expired (released ones too, until they would have)
	applied map[Key]map[string]appliedHold // by instance, then breaker
	cmds    map[string]bool                // command ids known to be in the store
	reach   map[string]map[Key]bool        // by hold: instances its creation has yet to reach
	statsMu sync.Mutex                     // guards the statistics; takes nothing else
	cover   map[coverKey][]coverSpan       // guarded by statsMu
	stats   map[statKey]*cbdash.HoldCounts // guarded by statsMu
	dirty   map[string]bool                // hold ids with unsaved stats; guarded by statsMu
	recent  map[statKey]*recentCounts      // the last seconds' counts, for stop conditions; guarded by statsMu
	since   map[string]map[int]time.Time   // by hold, then stop condition: above since; guarded by statsMu
	// untils is each hold in holds by id (a keptHold: its expiry as
	// stored, to the millisecond, and the record without its coverage):
	// Until and HoldFor read it without mu, so that live state may ask
	// while it holds its own lock.
	untils sync.Map
}

// keptHold is what untils keeps of a hold.
type keptHold struct {
	until time.Time
	rec   cbdash.HoldRecord // Coverage nil
}

// appliedHold is the hold last sent to one breaker of one agent process.
type appliedHold struct {
	holdID    string
	created   time.Time // the hold's CreatedAt
	cmdID     string
	startedAt int64
}

// New returns a Manager with no holds; call Restore before use.
func New(cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Manager{cfg: cfg, log: log, now: cfg.Now, turns: turns{m: make(map[Key]*turn)}, changing: make(chan struct{}, 1),
		holds: make(map[string]cbdash.HoldRecord), applied: make(map[Key]map[string]appliedHold),
		cmds: make(map[string]bool), reach: make(map[string]map[Key]bool),
		cover: make(map[coverKey][]coverSpan), stats: make(map[statKey]*cbdash.HoldCounts), dirty: make(map[string]bool),
		recent: make(map[statKey]*recentCounts), since: make(map[string]map[int]time.Time)}
}

// Until returns the expiry of hold id, as stored, when the Manager keeps
// it (a hold not yet expired, released or not); ok is false otherwise.
// It takes no lock the Manager holds while it calls out (it may be called
// from Instances' methods or with live state's lock held).
func (m *Manager) Until(id string) (until time.Time, ok bool) {
	v, ok := m.untils.Load(id)
	if !ok {
		return time.Time{}, false
	}
	return v.(keptHold).until, true
}

// HoldFor returns the hold that governs breaker on inst with action
// (protocol.ActionForceOpen or ActionForceClosed) now: of the live holds
// whose selector covers it at its current step, the most recently
// created; ok is false when none does. Live state asks it for a breaker
// it sees forced in a window but whose forcing transition it never saw
// (a collector restart), so that the tile still says who held it, why
// and until when. Like Until, it takes no lock the Manager holds while
// it calls out.
func (m *Manager) HoldFor(inst cbdash.InstanceRef, breaker, action string) (h cbdash.Hold, ok bool) {
	now := m.now()
	var best cbdash.HoldRecord
	m.untils.Range(func(_, v any) bool {
		r := v.(keptHold).rec
		if r.Action == action && r.LiveAt(now) && r.Covering().Matches(inst, breaker) &&
			(!ok || r.CreatedAt.After(best.CreatedAt) || r.CreatedAt.Equal(best.CreatedAt) && r.ID > best.ID) {
			best, ok = r, true
		}
		return true
	})
	if !ok {
		return cbdash.Hold{}, false
	}
	return cbdash.Hold{HoldID: best.ID, Action: best.Action, Actor: best.Actor, Reason: best.Reason,
		Until: time.UnixMilli(best.Until.UnixMilli()).UTC()}, true
}

// keepLocked keeps h among the holds (mu held), with its expiry for Until.
func (m *Manager) keepLocked(h cbdash.HoldRecord) {
	m.holds[h.ID] = h
	rec := h
	rec.Coverage = nil
	m.untils.Store(h.ID, keptHold{until: time.UnixMilli(h.Until.UnixMilli()).UTC(), rec: rec})
}

// forgetLocked forgets expired hold id (mu held).
func (m *Manager) forgetLocked(id string) {
	delete(m.holds, id)
	m.untils.Delete(id)
}

// MaxHold is the longest hold accepted (Config.MaxHold).
func (m *Manager) MaxHold() time.Duration { return m.cfg.MaxHold }

// Create stores a hold and applies it to every connected instance it
// covers, now and at every later hello (an instance on HTTP ingest: at its
// next ingest), until it expires or is released. Breakers that cannot be
// held (holds_unsupported) are never sent it. The actor is req.Actor. It
// returns the hold with its coverage so far (answers arrive later: see
// Hold); every reachable instance it covers is covered when it returns.
//
// A drill (a force open with stop conditions) is refused while
// pre-flight finds a reason (see Preflight).
//
// Errors: cbdash.ErrInvalid naming the bad field (a ttl over
// Config.MaxHold names the limit; a selector whose live breakers all
// cannot be held gives their reason; a dropped stop condition that is not
// a default), cbdash.ErrConflict with pre-flight's reasons, or the
// store's error (then nothing was sent).
func (m *Manager) Create(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldRecord, error) {
	return m.createUntil(ctx, req, time.Time{})
}

// createUntil is Create; a non-zero until is the hold's end, whatever the
// time it is created at (req.TTL is then until less that time: a
// scheduled drill that starts late ends when it would have).
func (m *Manager) createUntil(ctx context.Context, req cbdash.HoldRequest, until time.Time) (cbdash.HoldRecord, error) {
	if err := req.Validate(m.cfg.MaxHold); err != nil {
		return cbdash.HoldRecord{}, err
	}
	if err := m.refuseUnsupported(ctx, req.Selector); err != nil {
		return cbdash.HoldRecord{}, err
	}
	stops, err := cbdash.EffectiveStops(m.cfg.DefaultStops, req.DropStops, req.StopIf)
	if err != nil {
		return cbdash.HoldRecord{}, err
	}
	if err := m.refusePreflight(ctx, req); err != nil {
		return cbdash.HoldRecord{}, err
	}
	return m.create(ctx, req, stops, until)
}

// Advise stores and applies a quorum advisory (see package quorum): a
// hold of actor cbdash.QuorumActor, applied as Create applies a hold,
// but without stop conditions (the server's defaults included) and
// without pre-flight, which are a drill's: an advisory is no drill, and
// an open incident on its dependency is its very occasion. It is
// released like any hold (Release), by an operator too.
//
// Errors: cbdash.ErrInvalid as Create's (and for another actor), or the
// store's error (then nothing was sent).
func (m *Manager) Advise(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldRecord, error) {
	if req.Actor != cbdash.QuorumActor || req.Action != protocol.ActionForceOpen || len(req.StopIf)+len(req.Steps) > 0 {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: an advisory is a force_open of actor %q, without stop conditions or steps", cbdash.ErrInvalid, cbdash.QuorumActor)
	}
	if err := req.Validate(m.cfg.MaxHold); err != nil {
		return cbdash.HoldRecord{}, err
	}
	if err := m.refuseUnsupported(ctx, req.Selector); err != nil {
		return cbdash.HoldRecord{}, err
	}
	return m.create(ctx, req, []cbdash.StopCondition{}, time.Time{})
}

// create stores hold req with stop conditions stops and applies it to
// every reachable instance it covers; a non-zero until is its end (see
// createUntil).
func (m *Manager) create(ctx context.Context, req cbdash.HoldRequest, stops []cbdash.StopCondition, until time.Time) (cbdash.HoldRecord, error) {
	now := m.now().UTC()
	var err error
	if req.TTL, err = ttlUntil(req.TTL, now, until); err != nil {
		return cbdash.HoldRecord{}, err
	}
	h := cbdash.HoldRecord{ID: m.newHoldID(now), HoldRequest: req, CreatedAt: now, Until: now.Add(req.TTL), Stops: stops}
	if len(req.Steps) > 0 {
		h.Step = 1
	}
	if err := m.cfg.Store.CreateHold(ctx, h); err != nil {
		return cbdash.HoldRecord{}, fmt.Errorf("record hold: %w", err)
	}
	done := m.change()
	defer done()
	m.mu.Lock()
	m.keepLocked(h)
	m.gen++
	var keys []Key
	for _, inst := range m.cfg.Instances.HoldInstances() {
		if inst.Reachable() && coversAny(h.Covering(), inst) { // an offline one gets it at its hello
			keys = append(keys, inst.key())
		}
	}
	m.reach[h.ID] = make(map[Key]bool, len(keys))
	for _, k := range keys {
		m.reach[h.ID][k] = true
	}
	m.mu.Unlock()
	m.reconcileAll(ctx, keys, func(k Key) (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		return inst, ok && inst.Reachable() && coversAny(h.Covering(), inst)
	})
	m.mu.Lock()
	delete(m.reach, h.ID)
	m.mu.Unlock()
	done()
	m.cfg.Cluster.HoldChanged(ctx, h.ID)
	return m.cfg.Store.Hold(ctx, h.ID)
}

// ttlUntil is ttl, or with until set the time from now to until.
// Errors: cbdash.ErrConflict when until has come.
func ttlUntil(ttl time.Duration, now, until time.Time) (time.Duration, error) {
	switch {
	case until.IsZero():
		return ttl, nil
	case !now.Before(until):
		return 0, fmt.Errorf("%w: its end %s has come", cbdash.ErrConflict, until.UTC().Format(time.RFC3339))
	}
	return until.Sub(now), nil
}

func coversAny(sel cbdash.Selector, inst Instance) bool {
	for _, b := range inst.Breakers {
		if _, no := inst.Unsupported[b]; !no && sel.Matches(inst.Ref, b) {
			return true
		}
	}
	return false
}

// Release ends hold id before its expiry: every instance breaker it
// governed returns to its automatic state (closed, with an empty window)
// unless an older live hold covers it, which is then applied again. actor
// and reason go into the audit log; reason is required.
//
// Errors: cbdash.ErrInvalid for a missing or bad reason,
// cbdash.ErrNotFound for an unknown hold, cbdash.ErrConflict for a hold
// already released or expired, or the store's error.
func (m *Manager) Release(ctx context.Context, id, actor, reason string) (cbdash.HoldRecord, error) {
	if strings.TrimSpace(reason) == "" {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: reason is required: it goes into the audit log", cbdash.ErrInvalid)
	}
	if len(reason) > 1000 {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: reason is longer than 1000 bytes", cbdash.ErrInvalid)
	}
	if err := cbdash.CheckText("reason", reason, false); err != nil {
		return cbdash.HoldRecord{}, err
	}
	return m.release(ctx, id, actor, reason, nil)
}

// release is Release once reason is checked; breach, when set, is the
// stop condition that ends the hold (recorded with it, at its At).
func (m *Manager) release(ctx context.Context, id, actor, reason string, breach *cbdash.HoldBreach) (cbdash.HoldRecord, error) {
	done := m.change()
	defer done()
	now := m.now().UTC()
	var h cbdash.HoldRecord
	var err error
	if breach != nil {
		now = breach.At
		h, err = m.cfg.Store.StopHold(ctx, id, actor, *breach)
	} else {
		h, err = m.cfg.Store.ReleaseHold(ctx, id, now, actor, reason)
	}
	if err != nil {
		return cbdash.HoldRecord{}, err
	}
	h.Coverage = nil
	m.mu.Lock()
	m.keepLocked(h)
	m.gen++
	var keys []Key
	for k, bs := range m.applied {
		for _, a := range bs {
			if a.holdID == id {
				keys = append(keys, k)
				break
			}
		}
	}
	m.mu.Unlock()
	m.endSpans(id, now)
	m.reconcileAll(ctx, sortKeys(keys), m.known)
	done()
	m.cfg.Cluster.HoldChanged(ctx, id)
	m.FlushStats(ctx)
	return m.cfg.Store.Hold(ctx, id)
}

// change waits until no other change of holds is being applied and
// returns the function that ends this one.
//
// done may be called more than once (the first call ends the change):
// callers defer it, so that a panic while a change is applied (in a
// handler whose panic the server recovers) does not stop every later
// change and the collector's sweep, and may call it earlier.
func (m *Manager) change() (done func()) {
	m.changing <- struct{}{}
	return sync.OnceFunc(func() { <-m.changing })
}

// known fetches instance k as it is, reachable or not.
func (m *Manager) known(k Key) (Instance, bool) { return m.cfg.Instances.HoldInstance(k) }

// sortKeys sorts keys by service then instance, and returns them.
func sortKeys(keys []Key) []Key {
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Instance, b.Instance))
	})
	return keys
}

// Holds returns the holds live at now (live true) or every hold, newest
// first, with their coverage; limit as cbdash.HoldQuery's. Errors: the
// store's.
func (m *Manager) Holds(ctx context.Context, live bool, limit int) ([]cbdash.HoldRecord, error) {
	q := cbdash.HoldQuery{Limit: limit}
	if live {
		q.LiveAt = m.now().UTC()
	}
	return m.cfg.Store.Holds(ctx, q)
}

// Hold returns one hold with its coverage. Errors: cbdash.ErrNotFound or
// the store's error.
func (m *Manager) Hold(ctx context.Context, id string) (cbdash.HoldRecord, error) {
	return m.cfg.Store.Hold(ctx, id)
}

// Covering returns the live holds whose selector covers breakers of
// dependency k, the governing one first where several match the same
// breakers (the most recently created wins).
func (m *Manager) Covering(k cbdash.DependencyKey) []cbdash.HoldRecord {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cbdash.HoldRecord
	for _, h := range m.holds {
		if h.LiveAt(now) && h.Selector.CoversDependency(k) {
			out = append(out, h)
		}
	}
	sortNewestFirst(out)
	return out
}

func (m *Manager) listLocked() []cbdash.HoldRecord {
	out := make([]cbdash.HoldRecord, 0, len(m.holds))
	for _, h := range m.holds {
		out = append(out, h)
	}
	return out
}
