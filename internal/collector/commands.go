package collector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/holds"
	"github.com/cbdash/cbdash/internal/ingest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// issue is Issue once the actor is in req.Actor. It records an operator command and sends it to the targeted
// instances that are connected; the others receive it when they reconnect,
// unless it expired. Targets: req.Instance names one instance; otherwise
// req.Share percent of the live instances (0 or 100: every known instance,
// stale ones included), each instance in or out by the stable hash of its
// id (cbdash.InShare), so a share stays a share as the fleet changes. The
// actor is req.Actor.
//
// Force open and force closed are holds: Issue creates one (see
// CreateHold) for the breaker, scoped to req.Instance or req.Share, and
// returns the command it was sent as to req.Service. Release and reset
// stay commands: a release of a dependency that live holds cover releases
// those holds (the release command of the newest is returned), also when
// no live instance has that breaker (a hold ahead of a deploy, or on a
// mistyped name), unless one
// of them spans every service or the release is scoped to part of the
// instances (then cbdash.ErrConflict names the holds to release by id); a
// reset of a held dependency is refused with cbdash.ErrConflict, since the
// hold would be applied again at the next hello. Release and reset may be
// delivered until their TTL, or Config.CommandDelivery when it is 0.
//
// A command for breakers that cannot be held (holds_unsupported in their
// hello) is refused up front with cbdash.ErrInvalid and the reason.
//
// Errors: cbdash.ErrInvalid naming the bad field, cbdash.ErrNotFound for
// a breaker or instance the collector does not know, cbdash.ErrConflict
// as above, or the store's error (then nothing was sent).
func (c *Collector) issue(ctx context.Context, req cbdash.CommandRequest) (cbdash.Command, error) {
	if err := validateRequest(&req); err != nil {
		return cbdash.Command{}, err
	}
	k := cbdash.DependencyKey{Service: req.Service, Breaker: req.Breaker}
	if req.Action == protocol.ActionRelease {
		// Before the live lookup: a hold whose selector names a breaker
		// no instance has (yet, or a typo) is released by that name too.
		if cmd, ok, err := c.releaseHolds(ctx, req); ok || err != nil {
			return cmd, err
		}
	}
	targets, err := c.targets(k, req.Instance, req.Share)
	if err != nil {
		return cbdash.Command{}, err
	}
	switch req.Action {
	case protocol.ActionForceOpen, protocol.ActionForceClosed:
		return c.issueHold(ctx, req)
	case protocol.ActionReset:
		if hs := c.holdsCovering(k); len(hs) > 0 {
			return cbdash.Command{}, fmt.Errorf("%w: %s is held by %s; release the hold first, or it is applied again at the next hello",
				cbdash.ErrConflict, k, holdList(hs))
		}
	}
	if err := c.refuseUnsupportedTargets(ctx, k, targets); err != nil {
		return cbdash.Command{}, err
	}
	now := c.now().UTC()
	cmd := cbdash.Command{ID: newID(), CommandRequest: req, IssuedAt: now}
	switch {
	case req.TTL > 0:
		cmd.ExpiresAt = now.Add(req.TTL)
	default:
		cmd.ExpiresAt = now.Add(c.cfg.CommandDelivery)
	}
	return cmd, c.send(ctx, &cmd, targets, now)
}

// send records cmd (the audit log) with targets pending, publishes it and
// sends it to the targets connected here or to another collector of the
// cluster.
func (c *Collector) send(ctx context.Context, cmd *cbdash.Command, targets []string, now time.Time) error {
	for _, inst := range targets {
		cmd.Targets = append(cmd.Targets, cbdash.CommandTarget{Instance: inst, Status: cbdash.TargetPending})
	}
	if err := c.store.CreateCommand(ctx, *cmd); err != nil {
		return fmt.Errorf("record command: %w", err)
	}
	c.cmds.track(*cmd)
	c.hub.publish(cbdash.Event{Kind: cbdash.EventCommand, At: now, Command: cmd})
	wire := wireCommand(*cmd, now)
	for _, s := range c.live.Conns(cmd.Service, targets) {
		s.Send(wire)
	}
	c.fleet.route(ctx, cmd.Service, targets, wire)
	return nil
}

// probeCommands sends the probe rotation's defer_probes commands
// (quorum.Commands).
type probeCommands struct{ c *Collector }

// DeferProbes records and sends a defer_probes of actor
// cbdash.QuorumActor. Its delivery deadline is the collector's delivery
// window (a late delivery carries what is left of ttl: 0 ends the
// deferral, never a longer one).
func (p probeCommands) DeferProbes(ctx context.Context, k cbdash.DependencyKey, instances []string, ttl time.Duration, reason string) error {
	c := p.c
	now := c.now().UTC()
	cmd := cbdash.Command{ID: newID(), IssuedAt: now, ExpiresAt: now.Add(max(ttl, c.cfg.CommandDelivery)),
		CommandRequest: cbdash.CommandRequest{Service: k.Service, Breaker: k.Breaker, Action: protocol.ActionDeferProbes,
			TTL: ttl, Reason: ingest.Truncate(reason, 1000), Actor: cbdash.QuorumActor}}
	if len(instances) == 1 {
		cmd.Instance = instances[0]
	}
	return c.send(ctx, &cmd, instances, now)
}

// issueHold creates the hold a force command asks for and returns the
// command it was sent as to req.Service.
func (c *Collector) issueHold(ctx context.Context, req cbdash.CommandRequest) (cbdash.Command, error) {
	hr := cbdash.HoldRequest{Selector: cbdash.Selector{Service: req.Service, Breaker: req.Breaker, Share: req.Share},
		Action: req.Action, TTL: req.TTL, Reason: req.Reason, Actor: req.Actor}
	if req.Instance != "" {
		hr.Selector.Instances = []string{req.Instance}
	}
	h, err := c.createHold(ctx, hr)
	if err != nil {
		return cbdash.Command{}, err
	}
	return c.holdCommand(ctx, holds.CommandID(h.ID, req.Service), h, req.Service, req.Breaker, req.Action, h.Reason, h.Actor, h.CreatedAt)
}

// releaseHolds releases the live holds covering req's dependency; ok is
// false when none does.
func (c *Collector) releaseHolds(ctx context.Context, req cbdash.CommandRequest) (cbdash.Command, bool, error) {
	k := cbdash.DependencyKey{Service: req.Service, Breaker: req.Breaker}
	hs := c.holdsCovering(k)
	if len(hs) == 0 {
		return cbdash.Command{}, false, nil
	}
	for _, h := range hs {
		if h.Selector.Service == cbdash.AnyService || req.Instance != "" || (req.Share > 0 && req.Share < 100) {
			return cbdash.Command{}, true, fmt.Errorf("%w: %s is held by %s; release a hold by its id (cbdash release HOLD-ID)",
				cbdash.ErrConflict, k, holdList(hs))
		}
	}
	reason := req.Reason
	if strings.TrimSpace(reason) == "" {
		reason = "released from " + k.String()
	}
	var last cbdash.HoldRecord
	for _, h := range hs {
		r, err := c.releaseHold(ctx, h.ID, req.Actor, reason)
		if err != nil {
			return cbdash.Command{}, true, err
		}
		last = r
	}
	cmd, err := c.holdCommand(ctx, holds.ReleaseCommandID(last.ID, req.Service), last, req.Service, req.Breaker,
		protocol.ActionRelease, last.ReleaseReason, last.ReleasedBy, last.ReleasedAt)
	return cmd, true, err
}

// holdCommand returns a hold's command from the audit log, or, when no
// instance was reached (so none was recorded), the command as it would be.
func (c *Collector) holdCommand(ctx context.Context, id string, h cbdash.HoldRecord, service, breaker, action, reason, actor string, at time.Time) (cbdash.Command, error) {
	cmd, err := c.store.Command(ctx, id)
	if err == nil {
		return cmd, nil
	}
	if !errors.Is(err, cbdash.ErrNotFound) {
		return cbdash.Command{}, err
	}
	cmd = cbdash.Command{ID: id, HoldID: h.ID, IssuedAt: at, Targets: []cbdash.CommandTarget{},
		CommandRequest: cbdash.CommandRequest{Service: service, Breaker: breaker, Action: action, Reason: reason, Actor: actor}}
	if action != protocol.ActionRelease {
		cmd.ExpiresAt, cmd.TTL = h.Until, h.TTL
	}
	return cmd, nil
}

func holdList(hs []cbdash.HoldRecord) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = "hold " + h.ID + " (" + h.Selector.String() + ")"
	}
	return strings.Join(parts, ", ")
}

// validateRequest checks a command request; errors wrap cbdash.ErrInvalid.
func validateRequest(r *cbdash.CommandRequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", cbdash.ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case r.Service == "":
		return bad("service is required")
	case r.Breaker == "":
		return bad("breaker is required")
	case !protocol.ValidAction(r.Action):
		return bad("action %q is not one of force_open, force_closed, release, reset", ingest.Truncate(r.Action, 40))
	case r.TTL < 0:
		return bad("ttl is negative")
	case r.TTL == 0 && (r.Action == protocol.ActionForceOpen || r.Action == protocol.ActionForceClosed):
		return bad("ttl is required for %s", r.Action)
	case math.IsNaN(r.Share) || r.Share < 0 || r.Share > 100:
		return bad("share must be within 0..100 (percent)")
	case r.Instance != "" && r.Share != 0 && r.Share != 100:
		return bad("instance and share are exclusive")
	}
	return validateWords(r)
}

// validateWords checks a command request's reason and actor.
func validateWords(r *cbdash.CommandRequest) error {
	switch {
	case len(r.Reason) > 1000:
		return fmt.Errorf("%w: reason is longer than 1000 bytes", cbdash.ErrInvalid)
	case len(r.Actor) > protocol.MaxNameLen:
		return fmt.Errorf("%w: actor is longer than %d bytes", cbdash.ErrInvalid, protocol.MaxNameLen)
	}
	return cbdash.CheckText("reason", r.Reason, false)
}

// wireCommand is the protocol message for cmd sent at now
// (ingest.WireCommand).
func wireCommand(cmd cbdash.Command, now time.Time) protocol.Command {
	return ingest.WireCommand(cmd, now)
}

// newID names a command: 26 characters of base32 (A-Z, 2-7), 130 random
// bits (crypto/rand.Text).
func newID() string {
	return rand.Text()
}

// commandResults publishes the commands a stored batch of instance k
// answered (the store recorded the results in the batch's transaction,
// for the commands of k's service that target k only, and for the
// breaker the command named). A result for a command of another service,
// one that does not target k or one that names another breaker changed
// nothing: it is logged and counted, not published.
func (c *Collector) commandResults(k instKey, rs []protocol.CommandResult) {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		cmd, err := c.store.Command(context.Background(), r.ID)
		if err != nil {
			c.log.Info("command result for an unknown command", "id", r.ID, "service", k.service, "instance", k.instance, "err", err)
			continue
		}
		if !targets(cmd, k) {
			c.ing.Distrusted(ingest.DistrustForeignResult)
			c.log.Warn("command result refused: the command is not for this instance", "id", r.ID,
				"command_service", cmd.Service, "service", k.service, "instance", k.instance)
			continue
		}
		if r.Breaker != cmd.Breaker {
			c.ing.Distrusted(ingest.DistrustForeignResult)
			c.log.Warn("command result refused: it names another breaker than the command", "id", r.ID,
				"command_breaker", cmd.Breaker, "breaker", r.Breaker, "service", k.service, "instance", k.instance)
			continue
		}
		c.cmds.answered(r.ID, k)
		c.hub.publish(cbdash.Event{Kind: cbdash.EventCommand, At: c.now(), Command: &cmd})
	}
}

// targets reports whether cmd is a command of k's service with k's
// instance among its targets.
func targets(cmd cbdash.Command, k instKey) bool {
	if cmd.Service != k.service {
		return false
	}
	for _, t := range cmd.Targets {
		if t.Instance == k.instance {
			return true
		}
	}
	return false
}

// expireCommands marks the targets that did not answer before their
// command expired.
func (c *Collector) expireCommands(ctx context.Context) {
	now := c.now()
	for id, instances := range c.cmds.expired(now) {
		for _, inst := range instances {
			t := cbdash.CommandTarget{Instance: inst, Status: cbdash.TargetExpired, At: now.UTC()}
			if err := c.store.SetCommandTarget(ctx, id, t); err != nil {
				if ctx.Err() == nil {
					c.log.Error("expire command target", "id", id, "instance", inst, "err", err)
				}
				continue
			}
		}
		if cmd, err := c.store.Command(ctx, id); err == nil {
			c.hub.publish(cbdash.Event{Kind: cbdash.EventCommand, At: now, Command: &cmd})
		}
	}
}

// pendingCommands tracks, in memory, the targets of each command that have
// not answered yet, to expire them.
type pendingCommands struct {
	mu   sync.Mutex
	cmds map[string]*pendingCommand
}

type pendingCommand struct {
	service   string
	expires   time.Time
	instances map[string]bool
}

func newPendingCommands() *pendingCommands {
	return &pendingCommands{cmds: make(map[string]*pendingCommand)}
}

func (p *pendingCommands) track(cmd cbdash.Command) {
	pc := &pendingCommand{service: cmd.Service, expires: cmd.ExpiresAt, instances: make(map[string]bool)}
	for _, t := range cmd.Targets {
		if t.Status == cbdash.TargetPending {
			pc.instances[t.Instance] = true
		}
	}
	if len(pc.instances) == 0 || cmd.ExpiresAt.IsZero() {
		return
	}
	p.mu.Lock()
	p.cmds[cmd.ID] = pc
	p.mu.Unlock()
}

// answered forgets target k of command id (none when id is a command of
// another service).
func (p *pendingCommands) answered(id string, k instKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.cmds[id]; pc != nil && pc.service == k.service {
		delete(pc.instances, k.instance)
		if len(pc.instances) == 0 {
			delete(p.cmds, id)
		}
	}
}

// expired removes and returns the unanswered targets of commands expired
// at now, by command ID.
func (p *pendingCommands) expired(now time.Time) map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out map[string][]string
	for id, pc := range p.cmds {
		if now.Before(pc.expires) {
			continue
		}
		if out == nil {
			out = make(map[string][]string)
		}
		for inst := range pc.instances {
			out[id] = append(out[id], inst)
		}
		delete(p.cmds, id)
	}
	return out
}
