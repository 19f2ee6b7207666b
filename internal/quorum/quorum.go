// Package quorum advises a dependency's instances to open when enough of
// their peers have opened on their own (issue 35's quorum-advised trips).
//
// An Advisor reads the live state of every dependency a rule turns on
// (cbdash.QuorumRuleFor) and, when the instances that tripped on their
// own make a quorum (cbdash.Quorum.Met: at least Q % of the instances at
// their minimum calls, and at least M of them), it has the holds manager
// apply a time-boxed force_open (Holds.Advise, actor cbdash.QuorumActor)
// to the dependency's other live instances: those closed and governed by
// no operator's hold. The advisory is an ordinary hold, audited as one
// (who: the actor and the rule in its reason; why: the figures; to whom:
// its selector's instances and coverage; until when: its expiry), and it
// ends:
//
//   - by itself at its time box (the agents enforce the TTL even without
//     the collector);
//   - at the quorum's first close: one of the instances that were open
//     when it was sent is closed again (its probes succeeded), and the
//     Advisor releases it at once;
//   - by an operator's release, like any hold.
//
// After the first close or an operator's release, no advisory goes to that
// dependency again until its quorum has dissolved (a check finds it not
// met): the operator's word, or the recovery, is not overridden at the
// next check. After the time box, a quorum still met is advised again.
//
// Check is called by the collector that leads (four times a second);
// what the Advisor remembers of the advisories it sent is in memory, and
// a collector that takes over finds the live advisories among the holds.
package quorum

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Holds is what the Advisor needs of the holds manager (internal/holds).
type Holds interface {
	// Advise stores and applies an advisory hold.
	Advise(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldRecord, error)
	// Release ends a hold before its expiry.
	Release(ctx context.Context, id, actor, reason string) (cbdash.HoldRecord, error)
	// Covering lists the live holds covering breakers of k, the
	// governing one first.
	Covering(k cbdash.DependencyKey) []cbdash.HoldRecord
}

// Live is the collector's live state.
type Live interface {
	Dependencies() []cbdash.Dependency
}

// Config is what an Advisor is built from. Rules, Holds, Live and Now are
// required; Log nil = slog.Default(); MaxHold 0 = cbdash.DefaultMaxHold;
// Commands nil = no probe rotation (whatever the rules' Probes say: the
// server-wide kill switch of the rotation).
type Config struct {
	Rules    []cbdash.QuorumRule
	Holds    Holds
	Live     Live
	Commands Commands
	Now      func() time.Time
	Log      *slog.Logger
	MaxHold  time.Duration
}

// Advisor evaluates the quorum rules and sends and ends advisories. Its
// methods are safe for concurrent use (Check runs one at a time).
type Advisor struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex // one Check at a time; guards deps
	// deps is what the Advisor remembers of each dependency it advised.
	deps map[cbdash.DependencyKey]*advised
	// rot is each dependency's probe rotation while it runs (probes.go).
	rot map[cbdash.DependencyKey]*rotation
}

// advised is one dependency's advisory, as the Advisor sent it.
type advised struct {
	holdID  string
	until   time.Time
	members []string // the instances open on their own when it was sent, sorted
	// quiet is set after the quorum's first close or an operator's
	// release: nothing is advised until the quorum has dissolved.
	quiet bool
}

// New returns an Advisor.
func New(cfg Config) *Advisor {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Advisor{cfg: cfg, log: log, deps: make(map[cbdash.DependencyKey]*advised), rot: make(map[cbdash.DependencyKey]*rotation)}
}

// Check evaluates every dependency a rule turns on, sends an advisory
// where a quorum is met and none is live, and releases a live advisory at
// the quorum's first close. Holds' errors are logged; the next Check
// tries again.
func (a *Advisor) Check(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	for _, d := range a.cfg.Live.Dependencies() {
		r, on := cbdash.QuorumRuleFor(a.cfg.Rules, d.DependencyKey)
		if !on {
			continue
		}
		a.check(ctx, d, r, now)
		if r.Probes > 0 && a.cfg.Commands != nil {
			a.rotate(ctx, d, r, now)
		}
	}
}

// check is Check of one dependency d under rule r.
func (a *Advisor) check(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, now time.Time) {
	k := d.DependencyKey
	st := a.deps[k]
	if st == nil {
		st = &advised{}
		a.deps[k] = st
	}
	covering := a.cfg.Holds.Covering(k)
	live, waves := splitWaves(advisories(covering))
	if st.holdID != "" && !slices.ContainsFunc(live, func(h cbdash.HoldRecord) bool { return h.ID == st.holdID }) {
		// Ended: by its time box, or released before it (by an operator,
		// or by this Advisor at the first close, already quiet).
		st.quiet = st.quiet || now.Before(st.until)
		st.holdID = ""
	}
	q := cbdash.QuorumOf(d.PerInstance)
	if !q.Met(r) {
		st.quiet = false
	}
	if len(live) > 0 && a.watch(ctx, d, r, st, live) {
		return
	}
	if !q.Met(r) || st.quiet {
		return
	}
	// The closed instances no live advisory names: all of them when none
	// is live; while one is, those it missed (back from an advisory that
	// ran out before their expiry was seen, or new), advised on top.
	named := append(slices.Clone(live), waves...)
	targets := slices.DeleteFunc(a.targets(d, q, covering, now), func(inst string) bool {
		return slices.ContainsFunc(named, func(h cbdash.HoldRecord) bool { return slices.Contains(h.Selector.Instances, inst) })
	})
	if len(targets) == 0 {
		return
	}
	a.advise(ctx, k, r, q, targets, st)
}

// advisories keeps the advisories among holds (live, newest first).
func advisories(holds []cbdash.HoldRecord) []cbdash.HoldRecord {
	var out []cbdash.HoldRecord
	for _, h := range holds {
		if h.Actor == cbdash.QuorumActor {
			out = append(out, h)
		}
	}
	return out
}

// targets lists the instances an advisory goes to: the closed ones
// (including those over threshold) whose breaker can be held and that no
// operator's hold governs, at most 1,000 (a selector's limit).
func (a *Advisor) targets(d cbdash.Dependency, q cbdash.Quorum, covering []cbdash.HoldRecord, now time.Time) []string {
	var ops []cbdash.HoldRecord
	for _, h := range covering {
		if h.Actor != cbdash.QuorumActor {
			ops = append(ops, h)
		}
	}
	closed := map[string]bool{}
	for _, n := range append(slices.Clone(q.Closed), q.Over...) {
		closed[n] = true
	}
	var out []string
	for _, ib := range d.PerInstance {
		if !closed[ib.Instance] || ib.Stale || (ib.Config != nil && ib.Config.HoldsUnsupported) {
			continue
		}
		ref := cbdash.InstanceRef{Service: ib.Service, Instance: ib.Instance, Labels: ib.Labels}
		if _, held := cbdash.Governing(ops, ref, ib.Breaker, now); held {
			continue
		}
		out = append(out, ib.Instance)
	}
	slices.Sort(out)
	return out[:min(len(out), 1000)]
}

// advise sends dependency k's advisory to targets and remembers it in st.
func (a *Advisor) advise(ctx context.Context, k cbdash.DependencyKey, r cbdash.QuorumRule, q cbdash.Quorum, targets []string, st *advised) {
	box := q.Box(r, a.cfg.MaxHold)
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: k.Service, Breaker: k.Breaker, Instances: targets},
		Action: protocol.ActionForceOpen, TTL: box, Reason: q.Reason(r, box), Actor: cbdash.QuorumActor}
	h, err := a.cfg.Holds.Advise(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("quorum advisory", "dependency", k.String(), "rule", r.String(), "err", err)
		}
		return
	}
	*st = advised{holdID: h.ID, until: h.Until, members: slices.Sorted(slices.Values(q.Open))}
	a.log.Info("quorum advisory", "dependency", k.String(), "hold", h.ID, "rule", r.String(), "tripped", q.Tripped(),
		"eligible", q.Eligible, "instances", targets, "until", h.Until, "reason", h.Reason)
}

// watch follows the live advisories of dependency d (newest first): it
// releases them at the quorum's first close, and reports whether it
// did. An advisory this Advisor did not send (another collector led when
// it was) is adopted: its members are the instances it does not name
// that are open.
func (a *Advisor) watch(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, st *advised, live []cbdash.HoldRecord) bool {
	if h := live[0]; !slices.ContainsFunc(live, func(h cbdash.HoldRecord) bool { return h.ID == st.holdID }) {
		*st = advised{holdID: h.ID, until: h.Until, members: adoptMembers(d, h)}
	}
	first := firstClosed(d, st.members)
	if first == "" {
		return false
	}
	reason := "quorum's first close: " + d.Service + "/" + first + " closed again"
	a.stagger(ctx, d, r, live, reason)
	for _, h := range live {
		if _, err := a.cfg.Holds.Release(ctx, h.ID, cbdash.QuorumActor, reason); err != nil {
			if ctx.Err() == nil {
				a.log.Error("end quorum advisory", "dependency", d.DependencyKey.String(), "hold", h.ID, "err", err)
			}
			return true
		}
		a.log.Info("quorum advisory ended", "dependency", d.DependencyKey.String(), "hold", h.ID, "reason", reason)
	}
	st.quiet = true
	return true
}

// adoptMembers is the instances of d that h does not name and that are
// open or half-open, or closed by a transition after h was created: the
// quorum h was sent for, as far as live state tells (an instance that
// was closed then was named, unless an operator held it or it came
// later).
func adoptMembers(d cbdash.Dependency, h cbdash.HoldRecord) []string {
	var out []string
	for _, ib := range d.PerInstance {
		if slices.Contains(h.Selector.Instances, ib.Instance) {
			continue
		}
		switch {
		case ib.State == protocol.StateOpen, ib.State == protocol.StateHalfOpen,
			ib.State == protocol.StateClosed && ib.LastTransition.After(h.CreatedAt):
			out = append(out, ib.Instance)
		}
	}
	slices.Sort(out)
	return out
}

// firstClosed returns the first of members that is live and closed
// again; "" when none is.
func firstClosed(d cbdash.Dependency, members []string) string {
	for _, ib := range d.PerInstance {
		if !ib.Stale && ib.State == protocol.StateClosed && slices.Contains(members, ib.Instance) {
			return ib.Instance
		}
	}
	return ""
}

// waveReason starts the reason of the holds that stagger the return of
// advised instances at the quorum's first close.
const waveReason = "quorum's first close, staggered return: "

// maxWaves bounds the holds of a staggered return.
const maxWaves = 8

// splitWaves separates the holds of a staggered return (which end by
// themselves, one wave after another) from the advisories.
func splitWaves(hs []cbdash.HoldRecord) (live, waves []cbdash.HoldRecord) {
	for _, h := range hs {
		if strings.HasPrefix(h.Reason, waveReason) {
			waves = append(waves, h)
		} else {
			live = append(live, h)
		}
	}
	return live, waves
}

// stagger, at the quorum's first close, keeps the instances the live
// advisories hold from returning together: they are split (sorted) into
// up to maxWaves waves over the rule's spread (cbdash.QuorumRule.Spread,
// else the breakers' longest ramp, else their open duration); the first
// returns with the release of the advisories, each other one is held by
// an advisory of its own whose time box is its offset, so that it
// returns (closed, as at any release) by itself then, the agents
// enforcing it with or without the collector. A wave that cannot be
// held returns with the first.
func (a *Advisor) stagger(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, live []cbdash.HoldRecord, why string) {
	var insts []string
	for _, h := range live {
		insts = append(insts, h.Selector.Instances...)
	}
	slices.Sort(insts)
	insts = slices.Compact(insts)
	n := len(insts)
	waves := min(maxWaves, n)
	spread := rampSpread(d, r)
	for w := 1; w < waves; w++ {
		part := insts[w*n/waves : (w+1)*n/waves]
		off := (spread * time.Duration(w) / time.Duration(waves)).Truncate(time.Millisecond)
		req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: d.Service, Breaker: d.Breaker, Instances: part},
			Action: protocol.ActionForceOpen, TTL: off, Actor: cbdash.QuorumActor,
			Reason: fmt.Sprintf("%s%s; wave %d of %d returns %v after the first, over %v", waveReason, why, w+1, waves, off, spread)}
		if _, err := a.cfg.Holds.Advise(ctx, req); err != nil && ctx.Err() == nil {
			a.log.Error("staggered return", "dependency", d.DependencyKey.String(), "instances", part, "err", err)
		}
	}
	a.log.Info("staggered return", "dependency", d.DependencyKey.String(), "instances", n, "waves", waves, "spread", spread)
}
