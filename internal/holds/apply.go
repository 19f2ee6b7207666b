package holds

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
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
	m.reconcile(ctx, k, func() (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		return inst, ok && inst.Conn != nil
	}, true)
}

// Pull applies the holds governing instance k, which reports over HTTP
// ingest, at each of its ingests: it has no connection, so what it needs
// is recorded as pending targets, which the ingest response then carries
// (and carries again until the instance answers). A hold created or
// released meanwhile reaches it at its next ingest. It does nothing when
// k has a connection.
func (m *Manager) Pull(ctx context.Context, k Key) {
	m.reconcile(ctx, k, func() (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		inst.Pull = true
		return inst, ok && inst.Conn == nil
	}, true)
}

// reconcile sends instance k whatever its breakers need to be governed by
// the right hold, in k's turn: fetch returns the instance as it is now
// (ok false: nothing to do). The plan is made under mu, carried out
// outside it, and its outcome recorded under mu; when the holds changed
// meanwhile the instance is planned again.
func (m *Manager) reconcile(ctx context.Context, k Key, fetch func() (Instance, bool), atHello bool) {
	done := m.turns.take(k)
	defer done()
	for {
		inst, ok := fetch()
		now := m.now().UTC()
		m.mu.Lock()
		m.purgeLocked(k)
		if !ok {
			m.mu.Unlock()
			return
		}
		gen := m.gen
		steps := m.planLocked(inst, atHello, now)
		m.mu.Unlock()
		sent := m.carryOut(ctx, inst, steps, now)
		m.mu.Lock()
		m.recordLocked(inst, steps, sent)
		again := m.gen != gen
		m.mu.Unlock()
		if !again {
			return
		}
		atHello = false // what a hello resends has gone out
	}
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

// planLocked decides what inst's breakers need: the governing hold when
// another (or none) was sent to this process, the same command again at a
// hello (a reconnection), a release when the hold it had was released and
// none governs now.
func (m *Manager) planLocked(inst Instance, atHello bool, now time.Time) []step {
	holds := m.listLocked()
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

// carryOut writes and sends each step, in order; sent[i] reports whether
// steps[i] went out (false when the store failed).
func (m *Manager) carryOut(ctx context.Context, inst Instance, steps []step, now time.Time) []bool {
	sent := make([]bool, len(steps))
	for i, s := range steps {
		if s.kind == sendRelease {
			sent[i] = m.sendRelease(ctx, inst, s.breaker, s.hold, now)
		} else {
			sent[i] = m.send(ctx, inst, s.breaker, s.hold, s.cmdID, now, s.late)
		}
	}
	return sent
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

// send records and sends hold h to breaker b of inst as command cmdID,
// with its coverage row (JoinedLate late). It reports whether the command
// was sent (false when the store failed).
func (m *Manager) send(ctx context.Context, inst Instance, b string, h cbdash.HoldRecord, cmdID string, now time.Time, late bool) bool {
	cmd := cbdash.Command{ID: cmdID, HoldID: h.ID, IssuedAt: h.CreatedAt, ExpiresAt: h.Until,
		CommandRequest: cbdash.CommandRequest{Service: inst.Ref.Service, Breaker: b, Action: h.Action, TTL: h.TTL,
			Reason: h.Reason, Actor: h.Actor, Instance: strings.Join(h.Selector.Instances, ","), Share: h.Selector.Share}}
	if err := m.target(ctx, cmd, inst.Ref.Instance); err != nil {
		m.log.Error("record hold target", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
		return false
	}
	cov := cbdash.HoldCoverage{Service: inst.Ref.Service, Instance: inst.Ref.Instance, Breaker: b, StartedAt: inst.StartedAt,
		CommandID: cmdID, CoveredAt: now, JoinedLate: late}
	if err := m.cfg.Store.AddHoldCoverage(ctx, h.ID, cov); err != nil {
		m.log.Error("record hold coverage", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
	}
	m.cover1(coverKey{inst.key(), b}, coverSpan{holdID: h.ID, from: now.UnixMilli(), to: h.End().UnixMilli()})
	if inst.Conn != nil { // a pulling instance reads it from its pending commands
		inst.Conn.Deliver(cmd, now)
	}
	return true
}

// sendRelease records and sends breaker b of inst the release of hold h.
func (m *Manager) sendRelease(ctx context.Context, inst Instance, b string, h cbdash.HoldRecord, now time.Time) bool {
	cmd := cbdash.Command{ID: ReleaseCommandID(h.ID, inst.Ref.Service), HoldID: h.ID, IssuedAt: h.ReleasedAt,
		ExpiresAt: h.ReleasedAt.Add(m.cfg.CommandDelivery),
		CommandRequest: cbdash.CommandRequest{Service: inst.Ref.Service, Breaker: b, Action: protocol.ActionRelease,
			Reason: h.ReleaseReason, Actor: h.ReleasedBy}}
	if err := m.target(ctx, cmd, inst.Ref.Instance); err != nil {
		m.log.Error("record hold release target", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
		return false
	}
	if inst.Conn != nil {
		inst.Conn.Deliver(cmd, now)
	}
	return true
}

// target records instance as a pending target of cmd, creating cmd in the
// audit log the first time, and publishes the command.
func (m *Manager) target(ctx context.Context, cmd cbdash.Command, instance string) error {
	st := m.cfg.Store
	t := cbdash.CommandTarget{Instance: instance, Status: cbdash.TargetPending}
	m.mu.Lock()
	known := m.cmds[cmd.ID]
	m.mu.Unlock()
	if !known {
		cmd.Targets = []cbdash.CommandTarget{t}
		err := st.CreateCommand(ctx, cmd)
		if err != nil && !errors.Is(err, cbdash.ErrConflict) {
			return err
		}
		m.mu.Lock()
		m.cmds[cmd.ID] = true
		m.mu.Unlock()
		if err == nil {
			m.cfg.Events.Publish(cbdash.Event{Kind: cbdash.EventCommand, At: m.now(), Command: &cmd})
			return nil
		}
	}
	if err := st.SetCommandTarget(ctx, cmd.ID, t); err != nil {
		return err
	}
	if stored, err := st.Command(ctx, cmd.ID); err == nil {
		m.cfg.Events.Publish(cbdash.Event{Kind: cbdash.EventCommand, At: m.now(), Command: &stored})
	}
	return nil
}
