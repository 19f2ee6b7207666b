package live

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Key names one agent process's instance: its service and instance id.
type Key struct{ Service, Instance string }

// Conn is how an instance connected to this collector is reached (an
// agent's websocket session, internal/ingest): live state only keeps it,
// compares it and hands it back (ConnOf, Conns, Hello's previous), for
// the caller to send to the instance or end the older connection of an
// instance that connected again.
type Conn interface {
	// Send queues a message to the agent without blocking; an agent that
	// does not read has its connection closed.
	Send(v any)
	// Replaced ends the connection, which a newer connection of the same
	// instance replaces.
	Replaced()
	// Quiet is closed once the connection reads and writes nothing more
	// of the store.
	Quiet() <-chan struct{}
}

// Metrics receives what live state counts for the collector's Prometheus
// series; nil counts nothing.
type Metrics interface {
	// SetState says dependency k's aggregate is now v (its worst state).
	SetState(k cbdash.DependencyKey, v *cbdash.Dependency)
	// AddWindow adds a window report applied to dependency k (its calls,
	// its latency histogram).
	AddWindow(k cbdash.DependencyKey, w *protocol.Window)
	// Forget says dependency k is forgotten: no instance declares it.
	Forget(k cbdash.DependencyKey)
	// SubscriberDropped counts a subscriber dropped for falling behind.
	SubscriberDropped()
	// Subscribers says how many subscribers there are now.
	Subscribers(n int)
}

// noMetrics counts nothing.
type noMetrics struct{}

func (noMetrics) SetState(cbdash.DependencyKey, *cbdash.Dependency) {}
func (noMetrics) AddWindow(cbdash.DependencyKey, *protocol.Window)  {}
func (noMetrics) Forget(cbdash.DependencyKey)                       {}
func (noMetrics) SubscriberDropped()                                {}
func (noMetrics) Subscribers(int)                                   {}

// instance is one agent process as the live state knows it.
type instance struct {
	key       Key
	labels    map[string]string // replaced, never mutated: shared with views
	startedAt int64
	hello     *protocol.Hello // last hello, nil when restored from the store; never changed once here (lines point at its configurations)
	liveSeq   uint64          // highest batch seq applied to live state for startedAt
	lastSeen  time.Time
	stale     bool
	breakers  map[string]*ibreaker
	sess      Conn  // connected websocket session, nil when offline
	pull      bool  // its last hello came over HTTP ingest: commands reach it in ingest answers
	skewMs    int64 // the agent's clock minus the collector's (ms), measured from its batches
	// moved holds, by breaker, the other collector's part this
	// instance was taken out of at its hello here, until Seed says in
	// which state it was counted there (moved.go); nil when none.
	moved map[string]*remotePart

	// list holds breakers' values, in no order: bump walks it on every
	// batch, where a map's iteration costs more than the walk.
	list []*ibreaker
}

// ibreaker is one breaker on one instance.
//
// config and last point at immutable values, which the lines built from
// ib share (cbdash.InstanceBreaker.Config, Last): they are replaced,
// never written through, and never nil (noConfig, noWindow until
// something is known). config is the breaker's entry in the instance's
// last hello (&inst.hello.Breakers[i], declareLocked: no hello is changed
// once handed to live state; the decoders make a new one per message,
// and internal/source replaces its breakers' slice rather than write to
// it; hellos with equal lists share one, sharedLists) or a copy of a
// stored line's (restore, resync). last is the window
// in the applied batch itself
// (&b.Windows[i], applyLocked): once a session hands a batch to live
// state (toLive) nothing writes its windows, neither live state, nor the
// saver (merge copies them, store.SaveBatch and the holds' counts read
// them), nor the fleet (it encodes them); a batch whose times the
// collector moves (correctClock) or whose causes it vets (vetCauses) is
// a copy made before that. A stored line's window is copied (restore,
// resync).
type ibreaker struct {
	inst           *instance
	dep            *dep                    // its name is dep.key.Breaker
	config         *protocol.BreakerConfig // immutable, shared with lines; see above
	state          string
	stateAt        int64 // agent Unix ms of the report that set state
	lastTransition time.Time
	openSince      time.Time        // start of the current episode out of closed; zero while closed
	last           *protocol.Window // immutable, shared with the batch and lines; see above
	held           *cbdash.Hold
	lastTrip       *protocol.Transition
	lastTripAt     time.Time // when lastTrip was received
	// slot is ib's place in dep.sorted (and dep.lines, dep.slots);
	// dirty: ib is on dep.dirty (live.bump), to be visited by the next
	// compute, which rebuilds its line unless fresh: the line is as ib
	// is (refresh; bump clears it). Every change to an instance or its
	// breakers goes with a bump, under mu. windows counts its windows
	// applied since the dependency's last compute (saturating), busy
	// says it had more than one in the interval before
	// (dep.refreshApplied).
	slot               int
	member             int32 // ib's place in dep.members
	windows            uint8
	dirty, fresh, busy bool
}

// dep is one dependency (service + breaker name) across instances.
type dep struct {
	key        cbdash.DependencyKey
	fallback   cbdash.FallbackRun // the last run of its fallbacks (cbdash.NextFallbackRun)
	members    []*ibreaker        // one per instance, in no order (ibreaker.member)
	sorted     []*ibreaker        // members by instance name; nil when members changed
	shape      *shape             // nil when a member's hello changed
	recent     recent
	opensToday int
	lastChange time.Time
	// lines and slots are, in sorted's order, each member's line and what
	// the aggregate needs of it, in one array a view walks without
	// following a pointer per member; dirty lists the members changed
	// since (live.bump), rebuilt by the next compute.
	lines       []*cbdash.InstanceBreaker
	slots       []memberSlot
	dirty       []*ibreaker
	view        *cbdash.Dependency // cached aggregate, nil when out of date
	unpublished bool               // changed since the last dependency event
	published   time.Time          // clock time of the last event (pacing only)
	// remote holds other collectors' summaries of their members, by
	// collector (summary.go); unsummarized says this collector's own
	// summary changed since it was last taken (Summaries), summarized
	// that the last one taken had members.
	remote                   map[string]*remotePart
	unsummarized, summarized bool
	// fading holds the last parts of collectors gone (left the bus, or
	// silent for RemoteExpiry), by collector: their instances no longer
	// count, their last minute's calls still do, less as it slides out
	// (addFading), while those instances' new lines here fill in.
	fading map[string]*remotePart
}

// State is the in-memory state of every breaker of every instance. All
// methods take mu; events are published while mu is held so that a
// subscriber's snapshot and its event stream never overlap or leave a gap.
// Create it with New; all methods are safe for concurrent use.
type State struct {
	mu         sync.Mutex
	now        func() time.Time
	staleAfter time.Duration
	goneAfter  time.Duration
	instances  map[Key]*instance
	deps       map[cbdash.DependencyKey]*dep
	perService map[string]int // how many of deps each service has (Limits.MaxDependenciesPerService)
	hub        *hub
	metrics    Metrics // never nil (noMetrics)
	day        int64   // UTC day of opensToday
	// urgent holds dependencies whose state changed: they are published as
	// soon as the publisher runs (kick wakes it), off the ingest path.
	urgent map[*dep]struct{}
	kick   chan struct{}
	// applies queues batches from the connections to applyLoop, the one
	// goroutine that applies them: a thousand readers contending for mu
	// would convoy behind every aggregate computed under it.
	applies chan Update
	// transitions is the short path: the transitions of a batch, queued
	// ahead of it, which applyLoop applies before any queued window
	// report, so a transition never waits behind window-report work.
	transitions chan Update
	scratch     map[*dep]bool // applyLocked's dependencies to publish, reused
	due         []*dep        // Summaries' dependencies to summarise, reused (empty between calls)
	lists       sharedLists   // the hellos' breaker lists, shared among equal ones
	holdUntil   func(holdID string) (time.Time, bool)
	holdFor     func(inst cbdash.InstanceRef, breaker, action string) (cbdash.Hold, bool)
	applied     func(k Key, ts []protocol.Transition, at time.Time) // Config.Applied
	full        func(cbdash.DependencyKey) bool                     // Config.FullDetail
	// claimedBy names, per instance that said hello to another
	// collector since its last hello here, that collector (RemoteClaim,
	// moved.go).
	claimedBy map[Key]string
	// unsent lists the dependencies forgotten here since the last
	// summaries whose last summary counted instances: the next
	// summaries say they have none here (Summaries).
	unsent []cbdash.DependencyKey
}

// Update is a validated batch of instance Key, received at At, from an
// agent whose clock is Skew ms ahead of the collector's (negative:
// behind; internal/ingest measures it, and moves the times of an agent
// ahead by more than SkewTolerance before the batch gets here).
type Update struct {
	Key   Key
	Batch *protocol.Batch
	At    time.Time
	Skew  int64
	// Remote is set for another collector's update (RemoteBatch): it is
	// counted in that collector's metrics, not in these.
	Remote bool
	// early: only b's transitions, on the short path (the batch follows
	// on the applies queue, with transitionsDone, to apply the rest).
	early, transitionsDone bool
	// short is shared by the two requests of a batch whose transitions
	// take the short path: whichever is applied first applies the
	// transitions (under live's lock), the other not again.
	short *shortPath
}

// shortPath says whether a batch's transitions are applied (see
// Update.short); guarded by live.mu.
type shortPath struct{ applied bool }

// applyQueue bounds the batches waiting for applyLoop; readers wait when
// it is full.
const applyQueue = 4096

// maxApplyGroup bounds how many queued batches applyLoop applies under one
// lock hold.
const maxApplyGroup = 64

// Enqueue hands a validated batch to applyLoop; false when ctx ended
// first. A batch's transitions go ahead on the short path (before the
// batch, so applyLoop, which drains that path first, never applies the
// batch before them).
func (l *State) Enqueue(ctx context.Context, r Update) bool {
	if len(r.Batch.Transitions) > 0 {
		r.short = &shortPath{}
		e := r
		e.early = true
		select {
		case l.transitions <- e:
			r.transitionsDone = true
		case <-ctx.Done():
			return false
		}
	}
	select {
	case l.applies <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

// ApplyLoop applies queued batches until stop is closed, then applies what
// is left and returns.
func (l *State) ApplyLoop(stop <-chan struct{}) {
	for {
		select {
		case r := <-l.transitions:
			l.applyGroup(r)
		case r := <-l.applies:
			l.applyGroup(r)
		case <-stop:
			for {
				select {
				case r := <-l.transitions:
					l.applyGroup(r)
				case r := <-l.applies:
					l.applyGroup(r)
				default:
					return
				}
			}
		}
	}
}

// applyGroup applies r and whatever else is queued (up to maxApplyGroup)
// under one lock hold, the short path's transitions first (r itself first
// when it is one: it was queued before them).
func (l *State) applyGroup(r Update) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.early {
		l.applyLocked(r)
	}
	l.drainTransitionsLocked()
	if !r.early {
		l.applyLocked(r)
	}
	for range maxApplyGroup - 1 {
		select {
		case r := <-l.applies:
			// r's transitions were queued on the short path before r:
			// they are there now, and go first.
			l.drainTransitionsLocked()
			l.applyLocked(r)
		default:
			return
		}
	}
}

// drainTransitionsLocked applies every transition queued on the short
// path.
func (l *State) drainTransitionsLocked() {
	for {
		select {
		case r := <-l.transitions:
			l.applyLocked(r)
		default:
			return
		}
	}
}

// SkewTolerance is the clock skew of an agent below which its times are
// used as they are: an agent behind by more has its reports counted in
// the last minute by the time they were received.
const SkewTolerance = time.Second

// Config configures live state.
type Config struct {
	// Now is the collector's clock: the times it stamps, staleness and the
	// pacing of urgent publications.
	Now func() time.Time
	// StaleAfter is how long an instance may stay silent before it is
	// stale (no longer counted in its dependency's state); GoneAfter how
	// long a silent instance with no connection is kept before it is
	// forgotten.
	StaleAfter, GoneAfter time.Duration
	// SubscriberBuffer is how many events other than dependency views may
	// wait for each subscriber (see Subscribe).
	SubscriberBuffer int
	// Metrics receives the counts (nil: none).
	Metrics Metrics
	// HoldUntil, when set, returns the expiry of a stored hold
	// (cbdash.HoldRecord.Until) by its id; ok false when it is not
	// known. A breaker held by a stored hold is then shown held until
	// that time, the hold's one end, rather than until the expiry its
	// agent computed on its own clock from the command's TTL (up to
	// SkewTolerance later, and the delivery's delay). It is called with
	// the State's lock held: it must not call back into the State nor
	// wait for anything that does.
	HoldUntil func(holdID string) (until time.Time, ok bool)
	// HoldFor, when set, returns the stored hold that governs breaker on
	// inst with action now (ok false when none does). A breaker seen
	// forced in a window whose forcing transition was not seen (the
	// collector restarted during a hold) is then shown held by that hold,
	// with its actor, reason and end, rather than by nobody. Like
	// HoldUntil it is called with the State's lock held.
	HoldFor func(inst cbdash.InstanceRef, breaker, action string) (cbdash.Hold, bool)
	// FullDetail, when set, names the dependencies whose members served
	// by other collectors are kept line by line (RemoteHello,
	// RemoteBatch) rather than summarised (summary.go): those a quorum
	// rule turns on. Nil: every dependency is summarised. It must
	// not call back into the State.
	FullDetail func(cbdash.DependencyKey) bool
	// Applied, when set, is told the transitions of each batch of an
	// instance served here (not RemoteBatch's) as they are applied, at
	// (the batch's receipt), in the order they are applied, with the
	// State's lock held: before any summary that counts them is built
	// (PublishSummaries), so a collector that publishes both from these
	// calls sends them in the order its summaries saw them. It must not
	// block, call back into the State, or keep ts.
	Applied func(k Key, ts []protocol.Transition, at time.Time)
}

// New returns live state with no instance.
func New(cfg Config) *State {
	h := newHub(cfg.SubscriberBuffer)
	if cfg.Metrics != nil {
		h.onDrop, h.onCount = cfg.Metrics.SubscriberDropped, cfg.Metrics.Subscribers
	}
	l := newLive(cfg.Now, cfg.StaleAfter, cfg.GoneAfter, h, cfg.Metrics)
	l.holdUntil, l.holdFor, l.full, l.applied = cfg.HoldUntil, cfg.HoldFor, cfg.FullDetail, cfg.Applied
	return l
}

func newLive(now func() time.Time, staleAfter, goneAfter time.Duration, h *hub, m Metrics) *State {
	if m == nil {
		m = noMetrics{}
	}
	return &State{
		now: now, staleAfter: staleAfter, goneAfter: goneAfter,
		instances: make(map[Key]*instance), deps: make(map[cbdash.DependencyKey]*dep), perService: map[string]int{},
		hub: h, metrics: m, day: now().UTC().Unix() / 86400,
		urgent: make(map[*dep]struct{}), kick: make(chan struct{}, 1),
		applies: make(chan Update, applyQueue), transitions: make(chan Update, applyQueue),
		lists: make(sharedLists), claimedBy: make(map[Key]string),
	}
}

// noConfig and noWindow are the configuration and last window of a
// breaker before anything is known of them: zero values, shared by every
// such breaker and its lines, never written.
var (
	noConfig protocol.BreakerConfig
	noWindow protocol.Window
)

// ownCopy returns a copy of *p for live state to point at (p comes from a
// stored line, whose values the caller owns), or none when p is nil.
func ownCopy[T any](p, none *T) *T {
	if p == nil {
		return none
	}
	c := *p
	return &c
}

func stateRank(s string) int { return cbdash.StateRank(s) }

func forced(s string) bool { return s == protocol.StateForcedOpen || s == protocol.StateForcedClosed }

// bump records a change to inst or any of its breakers (every hello,
// batch, restore and staleness change): its lines in the dependencies'
// aggregates are rebuilt by their next compute. A breaker added after
// the bump changes its dependency's membership, which rebuilds every
// line of it.
func (l *State) bump(inst *instance) {
	for _, ib := range inst.list {
		ib.fresh = false
		if !ib.dirty {
			ib.dirty = true
			ib.dep.dirty = append(ib.dep.dirty, ib)
		}
	}
}

// SetOpensToday seeds the per-dependency count of opens since midnight UTC
// (from the store, at start).
func (l *State) SetOpensToday(m map[cbdash.DependencyKey]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, n := range m {
		l.depLocked(k).opensToday = n
	}
}

// storedInstanceLocked returns the instance of stored line r, made from
// it (labels, last seen) when live state has none.
func (l *State) storedInstanceLocked(r cbdash.InstanceBreaker) *instance {
	k := Key{r.Service, r.Instance}
	inst := l.instances[k]
	if inst == nil {
		inst = &instance{key: k, labels: r.Labels, lastSeen: r.LastSeen, breakers: make(map[string]*ibreaker)}
		l.instances[k] = inst
	}
	return inst
}

// Restore rebuilds instances from the store's last known state. They start
// with the last-seen time the store had, so the sweep marks them stale (or
// forgets them) as it would have.
func (l *State) Restore(ibs []cbdash.InstanceBreaker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ibs {
		inst := l.storedInstanceLocked(r)
		l.bump(inst)
		ib := l.breakerLocked(inst, r.Breaker)
		ib.config = ownCopy(r.Config, &noConfig)
		ib.state = r.State
		ib.lastTransition = r.LastTransition
		if cbdash.NotClosed(r.State) {
			ib.openSince = r.OpenSince
			ib.lastTrip, ib.lastTripAt = r.LastTrip, r.LastTripReceivedAt
		}
		ib.last = ownCopy(r.Last, &noWindow)
		ib.held = r.Held
		if ib.held == nil && forced(r.State) {
			ib.held = l.storedHoldLocked(inst, r)
		}
		if r.LastSeen.After(inst.lastSeen) {
			inst.lastSeen = r.LastSeen
		}
	}
	l.sweepLocked(l.now())
	for _, d := range l.deps {
		l.changedLocked(d)
	}
}

func (l *State) depLocked(k cbdash.DependencyKey) *dep {
	d := l.deps[k]
	if d == nil {
		d = &dep{key: k}
		l.deps[k] = d
		l.perService[k.Service]++
	}
	return d
}

func (l *State) breakerLocked(inst *instance, name string) *ibreaker {
	ib := inst.breakers[name]
	if ib == nil {
		d := l.depLocked(cbdash.DependencyKey{Service: inst.key.Service, Breaker: name})
		ib = &ibreaker{inst: inst, dep: d, state: protocol.StateClosed, config: &noConfig, last: &noWindow}
		inst.breakers[name] = ib
		inst.list = append(inst.list, ib)
		ib.member = int32(len(d.members))
		d.members = append(d.members, ib)
		d.sorted = nil
		d.view = nil
	}
	return ib
}

// Hello (re)declares an instance. storedSeq is the last sequence number the
// store holds for (service, instance, startedAt); live state never applies a
// batch at or below it. welcome, when not nil, runs under the lock before
// s becomes the instance's session: what it queues precedes any command
// sent to s. It returns the instance's previous session, if any, so the
// caller can close it outside the lock. h's breaker list may be
// replaced by an equal one an earlier hello brought (sharedLists): the
// caller reads h only after the call, or copied before it.
func (l *State) Hello(h *protocol.Hello, storedSeq uint64, s Conn, at time.Time, welcome func()) (previous Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if welcome != nil {
		welcome()
	}
	k := Key{h.Service, h.Instance}
	inst := l.instances[k]
	if inst == nil {
		inst = &instance{key: k, breakers: make(map[string]*ibreaker)}
		l.instances[k] = inst
	}
	if inst.startedAt != h.StartedAt {
		inst.startedAt = h.StartedAt
		inst.liveSeq = 0
	}
	inst.liveSeq = max(inst.liveSeq, storedSeq)
	l.bump(inst)
	h.Breakers = l.lists.share(h.Service, h.Breakers)
	inst.hello = h
	inst.labels = h.Labels
	inst.lastSeen = at
	inst.stale = false
	inst.pull = s == nil
	if s != nil {
		if inst.sess != s {
			previous = inst.sess
		}
		inst.sess = s
	}
	l.declareLocked(inst, h.Breakers)
	l.movedHereLocked(inst)
	return previous
}

// declareLocked makes inst's breakers those its hello declares (configs
// as given, each pointing at its entry of breakers, the hello's own:
// immutable, see ibreaker), dropping the ones it no longer
// declares. An unchanged configuration is pointed at anew too, so that
// the previous hello's breakers are not kept alive.
func (l *State) declareLocked(inst *instance, breakers []protocol.BreakerConfig) {
	declared := make(map[string]bool, len(breakers))
	for i := range breakers {
		c := &breakers[i]
		declared[c.Name] = true
		ib := l.breakerLocked(inst, c.Name)
		ib.config = c
		ib.dep.shape = nil
		l.changedLocked(ib.dep)
	}
	for name, ib := range inst.breakers {
		if !declared[name] {
			l.dropBreakerLocked(ib)
		}
	}
}

// ConnOf returns the connection of instance k here, or nil.
func (l *State) ConnOf(k Key) Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inst := l.instances[k]; inst != nil {
		return inst.sess
	}
	return nil
}

// Disconnect forgets s as instance k's connection (if it still is).
func (l *State) Disconnect(k Key, s Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inst := l.instances[k]; inst != nil && inst.sess == s {
		inst.sess = nil
		if _, elsewhere := l.claimedBy[k]; elsewhere {
			l.forgetLocked(k) // it said hello to another collector meanwhile: its summaries count it
		}
	}
}

// Apply updates live state with a validated batch. It applies a batch at
// most once per instance run: seq must be above the highest applied one.
// It reports whether the batch was applied.
func (l *State) Apply(k Key, b *protocol.Batch, at time.Time) bool {
	return l.ApplyNow(Update{Key: k, Batch: b, At: at})
}

// ApplyNow is Apply with the request's skew.
func (l *State) ApplyNow(r Update) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applyLocked(r)
}

// applyLocked applies r (see Apply): its transitions, unless the other
// request of its batch applied them (Update.short), and, but for the
// short path's request, its window reports.
func (l *State) applyLocked(r Update) bool {
	inst := l.instances[r.Key]
	if r.early && r.short.applied {
		return false // its batch came first and applied them
	}
	if inst == nil || r.Batch.Seq <= inst.liveSeq {
		return false
	}
	l.bump(inst)
	if l.scratch == nil {
		l.scratch = make(map[*dep]bool)
	}
	urgent := l.scratch
	defer clear(urgent)
	if !r.early {
		l.seenLocked(inst, r, urgent)
	}
	l.rollDayLocked(r.At)
	l.transitionsLocked(inst, r, urgent)
	if !r.early {
		l.windowsLocked(inst, r, urgent)
	}
	for d := range urgent {
		l.changedLocked(d)
		l.urgent[d] = struct{}{}
	}
	if len(urgent) > 0 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// transitionsLocked applies the transitions of r to inst, unless the
// other request of its batch did (Update.short), marking their
// dependencies in urgent, and tells Config.Applied of those of an
// instance served here.
func (l *State) transitionsLocked(inst *instance, r Update, urgent map[*dep]bool) {
	transitions := r.Batch.Transitions
	if r.transitionsDone && r.short.applied {
		transitions = nil
	}
	if r.short != nil {
		r.short.applied = true
	}
	for i := range transitions {
		urgent[l.transitionLocked(inst, &transitions[i], r.At)] = true
	}
	if len(transitions) > 0 && !r.Remote && l.applied != nil {
		l.applied(r.Key, transitions, r.At)
	}
}

// seenLocked records that inst sent batch r: its seq, when it was last
// seen, its clock's skew, and that it is not stale (its dependencies are
// then urgent).
func (l *State) seenLocked(inst *instance, r Update, urgent map[*dep]bool) {
	inst.liveSeq = r.Batch.Seq
	inst.lastSeen = r.At
	if r.Batch.SentAt > 0 {
		inst.skewMs = r.Skew
	}
	if inst.stale {
		inst.stale = false
		for _, ib := range inst.breakers {
			urgent[ib.dep] = true
		}
	}
}

// transitionLocked applies transition t of inst, received at at, and
// publishes it; it returns the dependency it changed.
func (l *State) transitionLocked(inst *instance, t *protocol.Transition, at time.Time) *dep {
	ib := l.breakerLocked(inst, t.Breaker)
	ts := time.UnixMilli(t.At).UTC()
	if t.At >= ib.stateAt {
		ib.state, ib.stateAt = t.To, t.At
		ib.held = holdFrom(t, ib.held, l.holdUntil)
		ib.trackEpisode(t.From, t.To, ts)
	}
	if ts.After(ib.lastTransition) {
		ib.lastTransition = ts
	}
	if ts.After(ib.dep.lastChange) {
		ib.dep.lastChange = ts
	}
	if t.From == protocol.StateClosed && t.To == protocol.StateOpen { // a trip, as store.OpensSince counts
		ib.dep.opensToday++
		// The last trip is the last received: agents' clocks differ,
		// the collector's is one.
		trip := *t
		ib.lastTrip, ib.lastTripAt = &trip, at
	}
	rec := &cbdash.TransitionRecord{Service: inst.key.Service, Instance: inst.key.Instance, Transition: *t, ReceivedAt: at}
	l.hub.publish(cbdash.Event{Kind: cbdash.EventTransition, At: at, Transition: rec})
	return ib.dep
}

// windowsLocked applies the window reports of batch r of inst; a
// dependency whose state they change is added to urgent.
func (l *State) windowsLocked(inst *instance, r Update, urgent map[*dep]bool) {
	// An agent behind the collector: its reports count in the last minute
	// by the time they were received (one ahead had its times corrected).
	var late int64
	if r.Skew < -SkewTolerance.Milliseconds() {
		late = -r.Skew
	}
	nowSec := r.At.Unix()
	for i := range r.Batch.Windows {
		w := &r.Batch.Windows[i]
		ib := l.breakerLocked(inst, w.Breaker)
		if end := w.Start + w.Millis; end >= ib.stateAt {
			if ib.state != w.State {
				urgent[ib.dep] = true
			}
			ib.trackEpisode(ib.state, w.State, time.UnixMilli(w.Start).UTC())
			ib.state, ib.stateAt = w.State, end
			ib.held = l.holdFromWindow(inst, w, ib.held)
		}
		ib.last = w // the batch's own window: immutable from here (see ibreaker)
		ib.dep.fallback = cbdash.NextFallbackRun(ib.dep.fallback, *w)
		ib.dep.refreshApplied(ib)
		ib.dep.recent.add(w, late, nowSec)
		ib.dep.view = nil
		ib.dep.unpublished, ib.dep.unsummarized = true, true
		if !r.Remote {
			l.metrics.AddWindow(ib.dep.key, w)
		}
	}
}

// trackEpisode keeps openSince across a move from state from to state
// to at t: a move out of closed (or forced closed) starts an episode, a
// move back ends it, and moves between open, half-open and forced open
// (failed probes, a hold) continue it. A breaker seen out of closed with
// no episode (its transition was not seen) starts one at t.
func (ib *ibreaker) trackEpisode(from, to string, t time.Time) {
	switch {
	case !cbdash.NotClosed(to):
		ib.openSince = time.Time{}
	case !cbdash.NotClosed(from) || ib.openSince.IsZero():
		ib.openSince = t
	}
}

// urgentEvery is the shortest time between two events of one dependency
// for state changes: a dependency of a thousand instances whose breakers
// flip all the time is aggregated at most this often (its transitions are
// still published one by one, at once).
const urgentEvery = 250 * time.Millisecond

// FlushUrgent publishes the dependencies whose state changed, each at most
// every urgentEvery (paced on Config.Clock),
// one lock hold per dependency so that ingest never waits for more than
// one aggregate. It returns how long until a dependency it had to leave
// becomes due, 0 when none is left. The collector runs it whenever kick
// fires, so aggregating never delays the batch that changed it.
func (l *State) FlushUrgent() time.Duration {
	l.mu.Lock()
	due := make([]*dep, 0, len(l.urgent))
	for d := range l.urgent {
		due = append(due, d)
	}
	l.mu.Unlock()
	var wait time.Duration
	for _, d := range due {
		l.mu.Lock()
		if _, ok := l.urgent[d]; ok {
			if since := l.now().Sub(d.published); since < urgentEvery {
				if w := urgentEvery - since; wait == 0 || w < wait {
					wait = w
				}
			} else {
				delete(l.urgent, d)
				if l.deps[d.key] == d {
					l.publishLocked(d)
				}
			}
		}
		l.mu.Unlock()
	}
	return wait
}

// holdFrom keeps the hold of a forced state from the transition's command
// cause, and clears it when the breaker leaves forced states. A stored
// hold's expiry comes from until (when set and it knows the hold).
func holdFrom(t *protocol.Transition, prev *cbdash.Hold, until func(string) (time.Time, bool)) *cbdash.Hold {
	if !forced(t.To) {
		return nil
	}
	h := &cbdash.Hold{
		CommandID: t.Cause.CommandID, Action: t.Cause.Action, Actor: t.Cause.Actor, Reason: t.Cause.Reason,
	}
	h.HoldID, _ = cbdash.HoldOfCommand(h.CommandID)
	if h.Action == "" {
		h.Action = actionOf(t.To)
	}
	if t.Cause.ExpiresAt > 0 {
		h.Until = time.UnixMilli(t.Cause.ExpiresAt).UTC()
	}
	if h.HoldID != "" && until != nil {
		if u, ok := until(h.HoldID); ok {
			h.Until = u
		}
	}
	if prev != nil && h.CommandID == "" && prev.Action == h.Action {
		return prev
	}
	return h
}

// holdFromWindow keeps an existing hold; when the transition that forced
// the breaker was not seen (collector restart) it takes the stored hold
// that governs it (Config.HoldFor), or makes a bare one from the window.
func (l *State) holdFromWindow(inst *instance, w *protocol.Window, prev *cbdash.Hold) *cbdash.Hold {
	if !forced(w.State) {
		return nil
	}
	action := actionOf(w.State)
	if prev != nil && prev.Action == action {
		return prev
	}
	if h := l.storedHoldLocked(inst, cbdash.InstanceBreaker{Breaker: w.Breaker, State: w.State}); h != nil {
		return h
	}
	h := &cbdash.Hold{Action: action}
	if w.ForcedUntil > 0 {
		h.Until = time.UnixMilli(w.ForcedUntil).UTC()
	}
	return h
}

// storedHoldLocked is the hold governing restored line r of inst, by
// Config.HoldFor; nil when unknown.
func (l *State) storedHoldLocked(inst *instance, r cbdash.InstanceBreaker) *cbdash.Hold {
	if l.holdFor == nil {
		return nil
	}
	ref := cbdash.InstanceRef{Service: inst.key.Service, Instance: inst.key.Instance, Labels: inst.labels}
	if h, ok := l.holdFor(ref, r.Breaker, actionOf(r.State)); ok {
		return &h
	}
	return nil
}

func actionOf(state string) string {
	if state == protocol.StateForcedOpen {
		return protocol.ActionForceOpen
	}
	return protocol.ActionForceClosed
}

func (l *State) rollDayLocked(at time.Time) {
	if day := at.UTC().Unix() / 86400; day != l.day {
		l.day = day
		for _, d := range l.deps {
			d.opensToday = 0
			d.view = nil
		}
	}
}

// changedLocked marks d's aggregate out of date and due for publication.
func (l *State) changedLocked(d *dep) {
	d.view = nil
	d.unpublished = true
	d.unsummarized = true
}

// publishLocked publishes d's current aggregate.
func (l *State) publishLocked(d *dep) {
	v := l.viewLocked(d)
	d.unpublished = false
	d.published = l.now()
	l.hub.publish(cbdash.Event{Kind: cbdash.EventDependency, At: l.now(), Dependency: v})
}

// Flush publishes every dependency that changed since its last event; the
// collector calls it periodically so that per-second window reports reach
// dashboards without an event per report.
func (l *State) Flush() {
	l.mu.Lock()
	l.rollDayLocked(l.now())
	due := make([]*dep, 0, len(l.deps))
	for _, d := range l.deps {
		if d.unpublished {
			due = append(due, d)
		}
	}
	l.mu.Unlock()
	// One dependency at a time: aggregating a dependency of many instances
	// takes a while, and ingest must not wait for all of them.
	for _, d := range due {
		l.mu.Lock()
		if l.deps[d.key] == d && d.unpublished {
			l.publishLocked(d)
		}
		delete(l.urgent, d)
		l.mu.Unlock()
	}
}

// Sweep marks instances stale after staleAfter and forgets them after
// goneAfter, publishing the dependencies that change.
func (l *State) Sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.sweepLocked(l.now()) {
		if l.deps[d.key] == d && d.unpublished {
			l.publishLocked(d)
		}
	}
}

func (l *State) sweepLocked(now time.Time) []*dep {
	changed := l.expireRemoteLocked(now, nil)
	for _, inst := range l.instances {
		age := now.Sub(inst.lastSeen)
		switch {
		case age > l.goneAfter && inst.sess == nil:
			changed = l.dropInstanceLocked(inst, changed)
		case age > l.staleAfter && !inst.stale:
			inst.stale = true
			l.bump(inst)
			for _, ib := range inst.breakers {
				l.changedLocked(ib.dep)
				changed = append(changed, ib.dep)
			}
		}
	}
	return changed
}

// dropInstanceLocked forgets instance inst, which has no session, and
// appends the dependencies that change to changed.
func (l *State) dropInstanceLocked(inst *instance, changed []*dep) []*dep {
	delete(l.instances, inst.key)
	for _, ib := range inst.breakers {
		changed = append(changed, ib.dep)
		l.dropBreakerLocked(ib)
	}
	l.lists.forget(inst.key.Service)
	return changed
}

// forgetLocked forgets offline instance k before Config.GoneAfter (to make
// room for a new instance under the instance quotas, limits.go), as sweep
// does after it, and publishes the dependencies that change. It does
// nothing to an instance with a session.
func (l *State) forgetLocked(k Key) {
	inst := l.instances[k]
	if inst == nil || inst.sess != nil {
		return
	}
	for _, d := range l.dropInstanceLocked(inst, nil) {
		if l.deps[d.key] == d && d.unpublished {
			l.publishLocked(d)
		}
	}
}

// dropBreakerLocked removes ib from its instance and dependency; a
// dependency left without instances is forgotten (after an event that
// shows it with no instances).
func (l *State) dropBreakerLocked(ib *ibreaker) {
	d := ib.dep
	if int(ib.member) >= len(d.members) || d.members[ib.member] != ib {
		return // dropped already
	}
	delete(ib.inst.breakers, d.key.Breaker)
	if i := slices.Index(ib.inst.list, ib); i >= 0 {
		ib.inst.list = slices.Delete(ib.inst.list, i, i+1)
	}
	last := d.members[len(d.members)-1]
	d.members[ib.member], last.member = last, ib.member
	d.members[len(d.members)-1] = nil
	d.members = d.members[:len(d.members)-1]
	d.sorted = nil
	l.changedLocked(d)
	if len(d.members) == 0 && len(d.remote) == 0 {
		l.forgetDepLocked(d)
	}
}

// forgetDepLocked forgets d, which has neither members nor other
// collectors' parts, after an event that shows it with no instances.
func (l *State) forgetDepLocked(d *dep) {
	if l.deps[d.key] != d {
		return
	}
	l.publishLocked(d)
	delete(l.deps, d.key)
	delete(l.urgent, d)
	if d.summarized {
		l.unsent = append(l.unsent, d.key) // the others hold its last summary: an empty one removes it
	}
	if l.perService[d.key.Service]--; l.perService[d.key.Service] <= 0 {
		delete(l.perService, d.key.Service)
	}
	l.metrics.Forget(d.key)
}

// viewLocked returns d's aggregate, computing it when out of date. The
// result is shared and must not be modified.
func (l *State) viewLocked(d *dep) *cbdash.Dependency {
	if d.view == nil {
		d.view = l.compute(d, l.now())
		l.metrics.SetState(d.key, d.view)
	}
	return d.view
}

// Dependencies returns copies of every dependency, worst first. Views
// are immutable once computed, so they are copied outside the lock.
func (l *State) Dependencies() []cbdash.Dependency {
	l.mu.Lock()
	out := l.snapshotLocked()
	l.mu.Unlock()
	for i := range out {
		out[i] = cloneDependency(&out[i])
	}
	return out
}

// snapshotLocked returns every dependency's current view, worst first,
// sharing the views' slices and maps (read-only, as in events).
func (l *State) snapshotLocked() []cbdash.Dependency {
	out := make([]cbdash.Dependency, 0, len(l.deps))
	for _, d := range l.deps {
		out = append(out, *l.viewLocked(d))
	}
	sortDependencies(out)
	return out
}

// Dependency returns a copy of one dependency; ok is false when unknown.
func (l *State) Dependency(k cbdash.DependencyKey) (cbdash.Dependency, bool) {
	l.mu.Lock()
	d := l.deps[k]
	if d == nil {
		l.mu.Unlock()
		return cbdash.Dependency{}, false
	}
	v := l.viewLocked(d)
	l.mu.Unlock()
	return cloneDependency(v), true
}

// subscribe registers a subscriber and returns the snapshot it starts
// from, atomically with respect to every publication. The snapshot shares
// the views' slices and maps, like events: read-only.
func (l *State) subscribe(kinds map[string]bool, buffer int) ([]cbdash.Dependency, *subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked(), l.hub.add(kinds, buffer)
}

// subscribeViews is subscribe with the views themselves, in no order,
// instead of copies sorted worst first: each is the collector's shared,
// immutable view (as an event's), so a subscriber that keeps them holds
// a pointer per dependency, not a copy.
func (l *State) subscribeViews(kinds map[string]bool, buffer int) ([]*cbdash.Dependency, *subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*cbdash.Dependency, 0, len(l.deps))
	for _, d := range l.deps {
		out = append(out, l.viewLocked(d))
	}
	return out, l.hub.add(kinds, buffer)
}

// sortDependencies sorts worst first, the one order of the API, the CLI
// and the overview's default (cbdash.OrderWorst).
func sortDependencies(ds []cbdash.Dependency) { cbdash.SortDependencies(ds, cbdash.OrderWorst) }

// cloneDependency copies a view for a caller that may change it: its own
// ByState and PerInstance slice, sharing the lines (immutable, see
// cbdash.Dependency.PerInstance) and the labels.
func cloneDependency(v *cbdash.Dependency) cbdash.Dependency {
	c := *v
	c.ByState = maps.Clone(v.ByState)
	c.PerInstance = slices.Clone(v.PerInstance)
	return c
}

// Service summarises one service's live state.
type Service struct {
	Name      string `json:"name"`
	State     string `json:"state"`     // worst dependency state, as Dependency.State
	Breakers  int    `json:"breakers"`  // dependencies (breaker names)
	Instances int    `json:"instances"` // known instances, stale ones included
	Stale     int    `json:"stale"`
}

// Services summarises the known services, sorted by name. Its instances
// are those live state holds a line of and, of each other collector, as
// many as its summaries count on the service's dependency with the most
// (issue 36: the instances of a service declare its breakers alike; one
// that declares fewer is not counted twice), their stale ones likewise.
func (l *State) Services() []Service {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := make(map[string]*Service)
	get := func(name string) *Service {
		s := by[name]
		if s == nil {
			s = &Service{Name: name}
			by[name] = s
		}
		return s
	}
	for k, inst := range l.instances {
		s := get(k.Service)
		s.Instances++
		if inst.stale {
			s.Stale++
		}
	}
	type source struct{ service, from string }
	elsewhere := map[source]Summary{} // the largest summary of each other collector per service
	for _, d := range l.deps {
		s := get(d.key.Service)
		s.Breakers++
		if st := l.viewLocked(d).State; stateRank(st) < stateRank(s.State) {
			s.State = st
		}
		for from, p := range d.remote {
			if e := elsewhere[source{d.key.Service, from}]; p.s.Instances > e.Instances {
				elsewhere[source{d.key.Service, from}] = p.s
			}
		}
	}
	for src, sm := range elsewhere {
		s := get(src.service)
		s.Instances += sm.Instances
		s.Stale += sm.Stale
	}
	out := make([]Service, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SameHello reports whether h is the hello live state already has for the
// same agent process (so the HTTP ingest need not record it again).
func (l *State) SameHello(h *protocol.Hello) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	inst := l.instances[Key{h.Service, h.Instance}]
	return inst != nil && inst.hello != nil && inst.startedAt == h.StartedAt && reflect.DeepEqual(inst.hello, h)
}
