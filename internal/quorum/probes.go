package quorum

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The probe rotation (issue 35's "one set of probes per dependency"): for
// a dependency whose rule has Probes K > 0, while its quorum is met, the
// Advisor lets K of the instances open on their own probe it per open
// interval, in turn, and defers the others' probes with defer_probes
// commands (protocol.ActionDeferProbes), so that a dead dependency sees K
// probes per open interval, not K per instance:
//
//   - at the start, the first K instances (by name) probe on their own
//     timer; every other instance open on its own is deferred;
//   - a prober whose probe failed (open again after it was let probe) is
//     deferred again; once every prober has probed (or let its turn pass:
//     no probe within two intervals), and an interval after the last
//     probe, the next K in turn are let probe (a defer_probes of ttl 0:
//     open longer than their open duration, they go half-open at once);
//   - the verdict closed (an instance of the rotation closed again) ends
//     it: the deferred instances are let probe at offsets spread evenly
//     over the spread (see rampSpread), so that they close and ramp one
//     after another, not together (the advised instances return in
//     waves over it too: Advisor.stagger), and no rotation starts again
//     until the quorum has dissolved; a quorum that dissolves without a
//     verdict ends it at once, everyone let probe.
//
// Every deferral is time-boxed (probeBox intervals, renewed while the
// rotation lasts), and agents end theirs when they lose the collector: an
// instance never waits on a rotation that is gone. Every decision is a
// command of actor cbdash.QuorumActor, stored with its targets, its TTL
// (until when) and a reason with the rule and the figures (who, why, to
// whom), and logged.

// Commands is what the probe rotation needs of the collector: to record
// and send a defer_probes command.
type Commands interface {
	// DeferProbes records a defer_probes command of actor
	// cbdash.QuorumActor for breaker k on instances, with ttl (0 = end
	// the deferral) and reason, and sends it.
	DeferProbes(ctx context.Context, k cbdash.DependencyKey, instances []string, ttl time.Duration, reason string) error
}

// probeBox is a deferral's time box, in open intervals: it is renewed
// while at most probeRenew intervals are left of it.
const (
	probeBox   = 3
	probeRenew = 2
)

// rotation is one dependency's probe rotation.
type rotation struct {
	interval time.Duration        // the open duration: one probe round per interval
	held     map[string]time.Time // deferred instances, until when (the collector's clock)
	probers  map[string]prober    // instances let probe
	done     []string             // instances that had their turn since the order was last gone through
	last     time.Time            // when the last probe was seen to fail (or a turn let pass)
	// quiet is set after the verdict closed: no rotation until the
	// quorum has dissolved.
	quiet bool
}

// rotate runs the probe rotation of dependency d under rule r.
func (a *Advisor) rotate(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, now time.Time) {
	k := d.DependencyKey
	q := cbdash.QuorumOf(d.PerInstance)
	rt := a.rot[k]
	if rt == nil || rt.quiet {
		switch {
		case !q.Met(r):
			delete(a.rot, k) // dissolved: a later quorum starts a new rotation
		case rt == nil && len(q.Open) > r.Probes:
			a.rot[k] = a.startRotation(ctx, d, r, q, now)
		}
		return
	}
	if who := verdictClosed(d, rt); who != "" {
		a.endRotation(ctx, d, rt, "the probes' verdict is closed: "+who+" closed again", spread(d, r, rt))
		// No new rotation until the quorum has dissolved: the instances
		// let probe are recovering, not to be deferred again.
		a.rot[k] = &rotation{quiet: true}
		return
	}
	if !q.Met(r) {
		a.endRotation(ctx, d, rt, fmt.Sprintf("the quorum dissolved (%d of %d instances at minimum calls tripped, rule %s)", q.Tripped(), q.Eligible, r.String()), 0)
		delete(a.rot, k)
		return
	}
	a.turns(ctx, d, r, rt, now)
}

// startRotation starts dependency d's rotation: the first K instances
// open on their own probe, the others are deferred.
func (a *Advisor) startRotation(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, q cbdash.Quorum, now time.Time) *rotation {
	rt := &rotation{interval: cmpDur(q.OpenFor, cbdash.DefaultQuorumBox), held: map[string]time.Time{},
		probers: map[string]prober{}, last: now}
	open := slices.Sorted(slices.Values(q.Open))
	for _, inst := range open[:r.Probes] {
		rt.probers[inst] = prober{since: now, seen: lineOf(d, inst).LastTransition} // they probe on their own timer
	}
	why := fmt.Sprintf("probe rotation: %d of %d instances open on their own (%s); %d probe per %v open interval (now %s), the others wait for their verdict",
		q.Tripped(), q.Eligible, r.String(), r.Probes, rt.interval, strings.Join(open[:r.Probes], ", "))
	a.hold(ctx, d.DependencyKey, rt, open[r.Probes:], now, why)
	return rt
}

// turns moves dependency d's running rotation on: new open instances
// and probers that probed are deferred, the next probers let probe when
// their turn has come, deferrals renewed.
func (a *Advisor) turns(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, rt *rotation, now time.Time) {
	var hold []string
	for _, ib := range d.PerInstance {
		_, held := rt.held[ib.Instance]
		_, probing := rt.probers[ib.Instance]
		if !held && !probing && ib.State == protocol.StateOpen && !ib.Stale {
			hold = append(hold, ib.Instance) // opened since the start
		}
	}
	hold = append(hold, rt.probed(d, now)...)
	if len(hold) > 0 {
		slices.Sort(hold)
		a.hold(ctx, d.DependencyKey, rt, hold, now, fmt.Sprintf("probe rotation (%s): probed or opened; waits for the next probers' verdict", r.String()))
	}
	if len(rt.probers) == 0 && !now.Before(rt.last.Add(rt.interval)) {
		a.letProbe(ctx, d, r, rt, now)
	}
	a.renew(ctx, d.DependencyKey, r, rt, now)
}

// probed returns the probers that have had their turn, and forgets them
// as probers: those whose probe failed (open again since they were let
// probe) and those that let their turn pass (no probe, no call, in two
// intervals). Probers gone stale are forgotten.
func (rt *rotation) probed(d cbdash.Dependency, now time.Time) []string {
	var out []string
	for inst, p := range rt.probers {
		ib := lineOf(d, inst)
		switch {
		case ib == nil || ib.Stale:
			delete(rt.probers, inst)
			continue
		case ib.State != protocol.StateOpen:
			continue
		case !ib.LastTransition.Equal(p.seen): // a transition since: its probe failed
			rt.last = now
		case now.Sub(p.since) >= 2*rt.interval:
			rt.last = now.Add(-rt.interval)
		default:
			continue
		}
		out = append(out, inst)
		rt.done = append(rt.done, inst)
		delete(rt.probers, inst)
	}
	return out
}

// letProbe lets the next K instances in turn probe.
func (a *Advisor) letProbe(ctx context.Context, d cbdash.Dependency, r cbdash.QuorumRule, rt *rotation, now time.Time) {
	var waiting []string
	for _, inst := range slices.Sorted(maps.Keys(rt.held)) {
		if ib := lineOf(d, inst); ib != nil && !ib.Stale && ib.State == protocol.StateOpen {
			waiting = append(waiting, inst)
		}
	}
	var next []string
	for _, inst := range waiting {
		if len(next) < r.Probes && !slices.Contains(rt.done, inst) {
			next = append(next, inst)
		}
	}
	if len(next) == 0 && len(waiting) > 0 { // everyone had a turn: round again
		rt.done = nil
		next = waiting[:min(r.Probes, len(waiting))]
	}
	if len(next) == 0 {
		return
	}
	why := fmt.Sprintf("probe rotation (%s): their turn to probe for the fleet (%d per %v open interval; the last probe failed at %s)",
		r.String(), r.Probes, rt.interval, rt.last.UTC().Format(time.RFC3339Nano))
	if err := a.cfg.Commands.DeferProbes(ctx, d.DependencyKey, next, 0, why); err != nil {
		a.commandFailed(ctx, d.DependencyKey, err)
		return
	}
	for _, inst := range next {
		delete(rt.held, inst)
		rt.probers[inst] = prober{since: now, seen: lineOf(d, inst).LastTransition}
	}
	a.log.Info("probe rotation: turn", "dependency", d.DependencyKey.String(), "probers", next, "reason", why)
}

// renew renews the deferrals that have at most probeRenew intervals
// left.
func (a *Advisor) renew(ctx context.Context, k cbdash.DependencyKey, r cbdash.QuorumRule, rt *rotation, now time.Time) {
	var due []string
	for inst, until := range rt.held {
		if until.Sub(now) <= probeRenew*rt.interval {
			due = append(due, inst)
		}
	}
	if len(due) > 0 {
		slices.Sort(due)
		a.hold(ctx, k, rt, due, now, fmt.Sprintf("probe rotation (%s): still waiting for the probers' verdict (renewed)", r.String()))
	}
}

// hold defers instances' probes for probeBox intervals.
func (a *Advisor) hold(ctx context.Context, k cbdash.DependencyKey, rt *rotation, instances []string, now time.Time, why string) {
	if len(instances) == 0 {
		return
	}
	box := probeBox * rt.interval
	why += fmt.Sprintf("; deferred at most %v", box)
	if err := a.cfg.Commands.DeferProbes(ctx, k, instances[:min(len(instances), 1000)], box, why); err != nil {
		a.commandFailed(ctx, k, err)
		return
	}
	for _, inst := range instances {
		rt.held[inst] = now.Add(box)
	}
	a.log.Info("probe rotation: deferred", "dependency", k.String(), "instances", instances, "until", now.Add(box), "reason", why)
}

// endRotation ends dependency d's rotation: every deferred instance is
// let probe, at offsets spread evenly over spread (0: at once).
func (a *Advisor) endRotation(ctx context.Context, d cbdash.Dependency, rt *rotation, why string, spread time.Duration) {
	held := slices.Sorted(maps.Keys(rt.held))
	for i, inst := range held {
		off := spread * time.Duration(i) / time.Duration(max(len(held), 1))
		off = off.Truncate(time.Millisecond)
		reason := fmt.Sprintf("probe rotation ended: %s; let probe %v into a %v spread, so that ramps are staggered", why, off, spread)
		if err := a.cfg.Commands.DeferProbes(ctx, d.DependencyKey, []string{inst}, off, reason); err != nil {
			a.commandFailed(ctx, d.DependencyKey, err)
		}
	}
	a.log.Info("probe rotation ended", "dependency", d.DependencyKey.String(), "released", held, "spread", spread, "reason", why)
}

// verdictClosed returns an instance of the rotation closed again ("" when
// none is): the probes' verdict. Every instance of the rotation was open
// when it joined, so one closed now has closed since. (Transition times
// are the agents' clocks: the rotation compares none with its own.)
func verdictClosed(d cbdash.Dependency, rt *rotation) string {
	for _, ib := range d.PerInstance {
		_, held := rt.held[ib.Instance]
		_, probing := rt.probers[ib.Instance]
		if (held || probing || slices.Contains(rt.done, ib.Instance)) && !ib.Stale && ib.State == protocol.StateClosed {
			return ib.Instance
		}
	}
	return ""
}

// spread is the stagger of rule r's releases at the verdict: see
// rampSpread, the rotation's interval for the open duration.
func spread(d cbdash.Dependency, r cbdash.QuorumRule, rt *rotation) time.Duration {
	if s := rampSpread(d, r); s > 0 {
		return s
	}
	return rt.interval
}

// rampSpread is how long rule r staggers the return of d's instances
// over: r's Spread, else the longest ramp of d's breakers (their hello's
// ramp_ms), else the longest open duration, else DefaultQuorumBox. Each
// instance's ramp starts at its own offset, so the fleet's load rises
// over about the spread plus one ramp, not in one step.
func rampSpread(d cbdash.Dependency, r cbdash.QuorumRule) time.Duration {
	if r.Spread > 0 {
		return r.Spread
	}
	var ramp, open time.Duration
	for _, ib := range d.PerInstance {
		if ib.Config != nil {
			ramp = max(ramp, time.Duration(ib.Config.RampMillis)*time.Millisecond)
			open = max(open, time.Duration(ib.Config.OpenDurationMillis)*time.Millisecond)
		}
	}
	return cmpDur(ramp, cmpDur(open, cbdash.DefaultQuorumBox))
}

func (a *Advisor) commandFailed(ctx context.Context, k cbdash.DependencyKey, err error) {
	if ctx.Err() == nil {
		a.log.Error("probe rotation: defer_probes", "dependency", k.String(), "err", err)
	}
}

// lineOf is instance inst's line of d, nil when it has none.
func lineOf(d cbdash.Dependency, inst string) *cbdash.InstanceBreaker {
	for _, ib := range d.PerInstance {
		if ib.Instance == inst {
			return ib
		}
	}
	return nil
}

func cmpDur(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

// prober is an instance let probe: when (the collector's clock), and the
// last transition its line showed then (a new one means it probed).
type prober struct {
	since time.Time
	seen  time.Time
}
