package holds

import (
	"context"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
)

// turns orders the work for one instance key: one turn at a time per
// key. A turn is no lock over shared state: it is held while that
// instance's plan is carried out (its own few store writes), and only
// work for the same instance waits for it.
type turns struct {
	mu sync.Mutex
	m  map[Key]*turn
}

type turn struct {
	mu    sync.Mutex
	users int // holders and waiters; the turn is forgotten at 0
}

// take waits for k's turn and returns the function that ends it.
func (t *turns) take(k Key) (done func()) {
	t.mu.Lock()
	tn := t.m[k]
	if tn == nil {
		tn = &turn{}
		t.m[k] = tn
	}
	tn.users++
	t.mu.Unlock()
	tn.mu.Lock()
	return func() {
		tn.mu.Unlock()
		t.mu.Lock()
		if tn.users--; tn.users == 0 {
			delete(t.m, k)
		}
		t.mu.Unlock()
	}
}

// takeAll waits for the turns of keys, one after another, and returns
// the function that ends them all. keys must be distinct. Only a change
// of holds (one at a time) takes several turns, so two takeAll never
// wait for each other.
func (t *turns) takeAll(keys []Key) (done func()) {
	dones := make([]func(), len(keys))
	for i, k := range keys {
		dones[i] = t.take(k)
	}
	return func() {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i]()
		}
	}
}

// stepKind is what a step sends.
type stepKind int

const (
	sendHold    stepKind = iota // a hold's command, then recorded as applied
	resendHold                  // the applied command again, to a reconnection
	sendRelease                 // a released hold's release, then no longer applied
)

// step is one command a plan writes to the store and then sends to one
// breaker of an instance.
type step struct {
	kind    stepKind
	breaker string
	hold    cbdash.HoldRecord
	cmdID   string // sendHold, resendHold
	late    bool   // sendHold: the coverage row's JoinedLate
}

// Hello applies the holds governing instance k, which just said hello on
// a connection (a first connection, a reconnection, or a restart): it
// waits for k's own work in progress, never for another instance's. It
// does nothing when k has no connection.
func (m *Manager) Hello(ctx context.Context, k Key) {
	var w written
	m.reconcile(ctx, []Key{k}, func(k Key) (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		return inst, ok && inst.Conn != nil
	}, true, &w)
	m.publish(ctx, &w)
}

// Pull applies the holds governing instance k, which reports over HTTP
// ingest, at each of its ingests: it has no connection, so what it needs
// is recorded as pending targets, which the ingest response then carries
// (and carries again until the instance answers). A hold created or
// released meanwhile reaches it at its next ingest. It does nothing when
// k has a connection.
func (m *Manager) Pull(ctx context.Context, k Key) {
	var w written
	m.reconcile(ctx, []Key{k}, func(k Key) (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		inst.Pull = true
		return inst, ok && inst.Conn == nil
	}, true, &w)
	m.publish(ctx, &w)
}

// fetchFunc returns instance k as it is now; ok false: nothing to do for
// it.
type fetchFunc func(k Key) (inst Instance, ok bool)

// chunk is how many instances a change of holds applies at once: their
// writes are one store write (Store.ApplyHold), their turns are taken
// together. A larger chunk makes fewer, longer writes (a hello of another
// instance may wait behind one); 1,000 instances are 4 writes.
const chunk = 250

// reconcileAll is reconcile of keys (distinct), chunk instances at a
// time, in the order given; then it publishes each command written once,
// with every target stored by then (not once a chunk: reading back a
// command of a fleet-wide hold with its targets after each chunk read
// its rows n²/(2*chunk) times over).
func (m *Manager) reconcileAll(ctx context.Context, keys []Key, fetch fetchFunc) {
	var w written
	for len(keys) > 0 {
		n := min(chunk, len(keys))
		m.reconcile(ctx, keys[:n], fetch, false, &w)
		keys = keys[n:]
	}
	m.publish(ctx, &w)
}

// plan is what one instance needs sent (steps), and what of it went out
// (sent[i]: steps[i]; false when the store failed).
type plan struct {
	inst  Instance
	steps []step
	sent  []bool
}

// reconcile sends instances keys (distinct) whatever their breakers need
// to be governed by the right hold, in their turns: fetch returns each
// as it is now. The plans are made under mu (planAll), carried out
// outside it (one store write for them all), and their outcome recorded
// under mu; when the holds changed meanwhile the instances are planned
// again. The
// commands written in one store write are added to w, for the caller to
// publish.
func (m *Manager) reconcile(ctx context.Context, keys []Key, fetch fetchFunc, atHello bool, w *written) {
	done := m.turns.takeAll(keys)
	defer done()
	for {
		insts := make([]Instance, 0, len(keys))
		oks := make([]bool, 0, len(keys))
		for _, k := range keys {
			inst, ok := fetch(k)
			insts, oks = append(insts, inst), append(oks, ok)
		}
		now := m.now().UTC()
		plans, gen := m.planAll(keys, insts, oks, atHello, now)
		m.carryOut(ctx, plans, now, w)
		m.mu.Lock()
		for _, p := range plans {
			m.recordLocked(p.inst, p.steps, p.sent)
		}
		again := m.gen != gen
		m.mu.Unlock()
		if !again || len(plans) == 0 {
			return
		}
		atHello = false // what a hello resends has gone out
	}
}

// planAll plans, under mu, each instance of keys (insts[i], as fetched,
// when oks[i]) and returns the plans and the generation of holds they
// were made with. It takes mu for one instance at a time, a few
// microseconds, not for a chunk's 250 at once: a hello of any instance
// waits for mu, and a goroutine preempted while holding it for a chunk
// kept every hello waiting for as long.
func (m *Manager) planAll(keys []Key, insts []Instance, oks []bool, atHello bool, now time.Time) ([]*plan, uint64) {
	m.mu.Lock()
	gen := m.gen
	holds := m.listLocked() // one list for them all, not a copy an instance
	m.mu.Unlock()
	plans := make([]*plan, 0, len(keys))
	for i, k := range keys {
		m.mu.Lock()
		m.purgeLocked(k)
		if oks[i] {
			plans = append(plans, &plan{inst: insts[i], steps: m.planLocked(insts[i], holds, atHello, now)})
		}
		m.mu.Unlock()
	}
	return plans, gen
}

// purgeLocked forgets what was applied to k of holds that have expired
// (Sweep removed them): what governs those breakers now is planned
// afresh.
func (m *Manager) purgeLocked(k Key) {
	for b, a := range m.applied[k] {
		if _, live := m.holds[a.holdID]; !live {
			delete(m.applied[k], b)
		}
	}
}

// planLocked decides what inst's breakers need, holds being the holds
// kept (listLocked): the governing hold when another (or none) was sent
// to this process, the same command again at a hello (a reconnection), a
// release when the hold it had was released and none governs now.
func (m *Manager) planLocked(inst Instance, holds []cbdash.HoldRecord, atHello bool, now time.Time) []step {
	var steps []step
	for _, b := range inst.Breakers {
		if _, no := inst.Unsupported[b]; no {
			continue // refused up front; the agent would refuse it too
		}
		if s, ok := m.stepLocked(inst, b, holds, atHello, now); ok {
			steps = append(steps, s)
		}
	}
	return steps
}

// stepLocked is planLocked for breaker b; ok is false when b needs
// nothing sent.
func (m *Manager) stepLocked(inst Instance, b string, holds []cbdash.HoldRecord, atHello bool, now time.Time) (step, bool) {
	k := inst.key()
	prev, had := m.applied[k][b]
	win, ok := cbdash.Governing(holds, inst.Ref, b, now)
	switch {
	case ok && had && prev.holdID == win.ID && prev.startedAt == inst.StartedAt:
		// A reconnection: the agent answers again, or applies what it missed.
		return step{kind: resendHold, breaker: b, hold: win, cmdID: prev.cmdID}, atHello && inst.Conn != nil
	case ok:
		return m.sendStepLocked(inst, b, prev, had, win, atHello, now)
	case had:
		old := m.holds[prev.holdID]
		if !old.ReleasedAt.IsZero() && old.ReleasedAt.Before(old.Until) && inst.Reachable() {
			return step{kind: sendRelease, breaker: b, hold: old}, true
		}
		if inst.Reachable() { // else released while away: the release is sent at its hello
			delete(m.applied[k], b)
		}
	}
	return step{}, false
}

// sendStepLocked is the step that sends win, the hold governing breaker b
// of inst, in place of prev (had false: none); ok is false when inst is
// not reachable.
func (m *Manager) sendStepLocked(inst Instance, b string, prev appliedHold, had bool, win cbdash.HoldRecord, atHello bool, now time.Time) (step, bool) {
	if !inst.Reachable() {
		return step{}, false
	}
	k := inst.key()
	cmdID := CommandID(win.ID, inst.Ref.Service)
	if had && prev.startedAt == inst.StartedAt && prev.holdID != win.ID && win.CreatedAt.Before(prev.created) {
		cmdID = win.ID + "-" + shortID() // this process may have applied it before
	}
	// A hello during the hold's creation, of an instance the creation is
	// about to reach, is no late join.
	late := atHello && now.After(win.CreatedAt) && !m.reach[win.ID][k]
	if inst.Pull { // an ingest is no hello: late when the process started after the hold
		late = inst.StartedAt > win.CreatedAt.UnixMilli()
	}
	delete(m.reach[win.ID], k)
	return step{kind: sendHold, breaker: b, hold: win, cmdID: cmdID, late: late}, true
}

// recordLocked records what the steps that went out applied.
func (m *Manager) recordLocked(inst Instance, steps []step, sent []bool) {
	k := inst.key()
	for i, s := range steps {
		switch {
		case !sent[i]:
		case s.kind == sendHold:
			if m.applied[k] == nil {
				m.applied[k] = make(map[string]appliedHold)
			}
			m.applied[k][s.breaker] = appliedHold{holdID: s.hold.ID, created: s.hold.CreatedAt, cmdID: s.cmdID, startedAt: inst.StartedAt}
		case s.kind == sendRelease:
			delete(m.applied[k], s.breaker)
		}
	}
}
