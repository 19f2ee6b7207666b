package holds

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// carryOut records the steps of plans, in order, in one store write
// (Store.ApplyHold: the commands, their pending targets and the coverage
// rows), then sends each instance its commands, in order, and adds the
// commands written to w (see publish). When that write fails, each step
// is recorded, sent and published on its own (carryOutEach), as far as
// the store lets it. It sets each plan's sent.
func (m *Manager) carryOut(ctx context.Context, plans []*plan, now time.Time, w *written) {
	var ds []cbdash.HoldDelivery
	for _, p := range plans {
		p.sent = make([]bool, len(p.steps))
		for _, s := range p.steps {
			ds = append(ds, m.delivery(p.inst, s, now))
		}
	}
	if len(ds) == 0 {
		return
	}
	if err := m.cfg.Store.ApplyHold(ctx, ds); err != nil {
		if ctx.Err() != nil {
			// Stopping: the holds are stored, and sent again to each
			// instance at its next hello to a collector.
			m.log.Info("hold deliveries not recorded: the server is stopping", "deliveries", len(ds), "err", err)
			return
		}
		m.log.Warn("record hold deliveries in one write; recording them one by one", "deliveries", len(ds), "err", err)
		for _, p := range plans {
			m.carryOutEach(ctx, p, now)
		}
		return
	}
	m.stored(ds, w)
	i := 0
	for n, p := range plans {
		for j, s := range p.steps {
			m.deliver(p.inst, s, ds[i], now)
			p.sent[j] = true
			i++
		}
		if n%deliverRun == deliverRun-1 {
			runtime.Gosched()
		}
	}
}

// deliverRun is how many instances carryOut sends to before it lets
// other goroutines run: each send starts a goroutine that writes to the
// instance's connection, and a chunk's 250 in a row queued ahead of
// every goroutine woken meanwhile (another instance's hello waited
// behind all their writes, several milliseconds on two cores).
const deliverRun = 16

// delivery is step s of inst as the store records it.
func (m *Manager) delivery(inst Instance, s step, now time.Time) cbdash.HoldDelivery {
	t := cbdash.CommandTarget{Instance: inst.Ref.Instance, Status: cbdash.TargetPending}
	if s.kind == sendRelease {
		return cbdash.HoldDelivery{Command: m.releaseCommand(inst, s.breaker, s.hold), Target: t}
	}
	return cbdash.HoldDelivery{Command: holdCommand(inst, s.breaker, s.hold, s.cmdID), Target: t,
		Coverage: &cbdash.HoldCoverage{Service: inst.Ref.Service, Instance: inst.Ref.Instance, Breaker: s.breaker,
			StartedAt: inst.StartedAt, CommandID: s.cmdID, CoveredAt: now, JoinedLate: s.late}}
}

// deliver sends inst the command of step s, recorded as d, and counts
// what a hold covers from now.
func (m *Manager) deliver(inst Instance, s step, d cbdash.HoldDelivery, now time.Time) {
	if s.kind != sendRelease {
		m.cover1(coverKey{inst.key(), s.breaker}, coverSpan{holdID: s.hold.ID, from: now.UnixMilli(), to: s.hold.End().UnixMilli()})
	}
	if inst.Conn != nil { // a pulling instance reads it from its pending commands
		inst.Conn.Deliver(d.Command, now)
	}
}

// written is the commands a change of holds (or a hello) wrote with
// Store.ApplyHold, each as written (with the targets written), in the
// order first written.
type written struct {
	order []string
	cmds  map[string]*cbdash.Command
}

// stored notes that the commands of ds are in the store, and adds them
// to w.
func (m *Manager) stored(ds []cbdash.HoldDelivery, w *written) {
	if w.cmds == nil {
		w.cmds = make(map[string]*cbdash.Command)
	}
	for _, d := range ds {
		c := w.cmds[d.Command.ID]
		if c == nil {
			cmd := d.Command
			c = &cmd
			w.cmds[cmd.ID] = c
			w.order = append(w.order, cmd.ID)
		}
		c.Targets = append(c.Targets, d.Target)
	}
	m.mu.Lock()
	for _, id := range w.order {
		m.cmds[id] = true
	}
	m.mu.Unlock()
}

// publish publishes each command of w once, as stored (with all its
// targets), or as written when it cannot be read back.
func (m *Manager) publish(ctx context.Context, w *written) {
	for _, id := range w.order {
		cmd := w.cmds[id]
		if stored, err := m.cfg.Store.Command(ctx, id); err == nil {
			cmd = &stored
		}
		m.cfg.Events.Publish(cbdash.Event{Kind: cbdash.EventCommand, At: m.now(), Command: cmd})
	}
}

// carryOutEach records and sends p's steps one by one, in order: a step
// whose write fails is not sent.
func (m *Manager) carryOutEach(ctx context.Context, p *plan, now time.Time) {
	for i, s := range p.steps {
		if s.kind == sendRelease {
			p.sent[i] = m.sendRelease(ctx, p.inst, s.breaker, s.hold, now)
		} else {
			p.sent[i] = m.send(ctx, p.inst, s.breaker, s.hold, s.cmdID, now, s.late)
		}
	}
}

// holdCommand is the command hold h is sent as to breaker b of inst.
func holdCommand(inst Instance, b string, h cbdash.HoldRecord, cmdID string) cbdash.Command {
	return cbdash.Command{ID: cmdID, HoldID: h.ID, IssuedAt: h.CreatedAt, ExpiresAt: h.Until,
		CommandRequest: cbdash.CommandRequest{Service: inst.Ref.Service, Breaker: b, Action: h.Action, TTL: h.TTL,
			Reason: h.Reason, Actor: h.Actor, Instance: strings.Join(h.Selector.Instances, ","), Share: h.Selector.Share}}
}

// releaseCommand is the command the release of hold h is sent as to
// breaker b of inst.
func (m *Manager) releaseCommand(inst Instance, b string, h cbdash.HoldRecord) cbdash.Command {
	return cbdash.Command{ID: ReleaseCommandID(h.ID, inst.Ref.Service), HoldID: h.ID, IssuedAt: h.ReleasedAt,
		ExpiresAt: h.ReleasedAt.Add(m.cfg.CommandDelivery),
		CommandRequest: cbdash.CommandRequest{Service: inst.Ref.Service, Breaker: b, Action: protocol.ActionRelease,
			Reason: h.ReleaseReason, Actor: h.ReleasedBy}}
}

// send records and sends hold h to breaker b of inst as command cmdID,
// with its coverage row (JoinedLate late), in writes of their own. It
// reports whether the command was sent (false when the store failed).
func (m *Manager) send(ctx context.Context, inst Instance, b string, h cbdash.HoldRecord, cmdID string, now time.Time, late bool) bool {
	cmd := holdCommand(inst, b, h, cmdID)
	if err := m.target(ctx, cmd, inst.Ref.Instance); err != nil {
		m.storeFailed(ctx, "record hold target", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
		return false
	}
	cov := cbdash.HoldCoverage{Service: inst.Ref.Service, Instance: inst.Ref.Instance, Breaker: b, StartedAt: inst.StartedAt,
		CommandID: cmdID, CoveredAt: now, JoinedLate: late}
	if err := m.cfg.Store.AddHoldCoverage(ctx, h.ID, cov); err != nil {
		m.storeFailed(ctx, "record hold coverage", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
	}
	m.deliver(inst, step{kind: sendHold, breaker: b, hold: h}, cbdash.HoldDelivery{Command: cmd}, now)
	return true
}

// sendRelease records and sends breaker b of inst the release of hold h.
func (m *Manager) sendRelease(ctx context.Context, inst Instance, b string, h cbdash.HoldRecord, now time.Time) bool {
	cmd := m.releaseCommand(inst, b, h)
	if err := m.target(ctx, cmd, inst.Ref.Instance); err != nil {
		m.storeFailed(ctx, "record hold release target", "hold", h.ID, "instance", inst.Ref.Instance, "err", err)
		return false
	}
	m.deliver(inst, step{kind: sendRelease, breaker: b, hold: h}, cbdash.HoldDelivery{Command: cmd}, now)
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

// storeFailed logs a store write of a hold's that failed: an error, or
// only a note when ctx is done (the server stopping cancels its writes;
// the holds are stored and sent again at each instance's next hello).
func (m *Manager) storeFailed(ctx context.Context, msg string, args ...any) {
	if ctx.Err() != nil {
		m.log.Info(msg+": not recorded, the server is stopping", args...)
		return
	}
	m.log.Error(msg, args...)
}
