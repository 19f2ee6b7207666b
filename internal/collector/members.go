package collector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Members served elsewhere (issue 36). Live state holds the lines of the
// instances served here and only summaries of the others' (fleet.go);
// what lists a dependency's members (the dependency page, its API and
// per_instance of GET /api/v1/breakers, a command's or hold's targets
// chosen on the page) reads the others from the store, which keeps each
// instance breaker's last state (store.InstancesOf): state, labels,
// configuration, last transition and last seen, not the last window
// (Last is nil: no rates, no headroom). Their lines say so
// (cbdash.InstanceBreaker.Elsewhere): pages, the API and the CLI show
// their rates as on another collector, not as a window of no calls.

// noWindow and noConfig are the window and configuration of a stored
// line (none stored): zero values, never written.
var (
	noWindow protocol.Window
	noConfig protocol.BreakerConfig
)

// membersTimeout bounds the store read of the members served elsewhere;
// when it fails, the lines of those served here are answered.
const membersTimeout = 5 * time.Second

// withMembers adds to d (a copy) the store's lines of its members that
// live state has no line of, when its counts say there are some.
func (c *Collector) withMembers(d cbdash.Dependency) cbdash.Dependency {
	if d.Instances <= len(d.PerInstance) {
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), membersTimeout)
	defer cancel()
	ibs, err := c.store.InstancesOf(ctx, d.DependencyKey)
	if err != nil {
		c.log.Warn("members served by other collectors: not read from the store", "dependency", d.DependencyKey.String(), "err", err)
		return d
	}
	d.PerInstance = c.storedLines(d.PerInstance, ibs)
	return d
}

// DependenciesWithMembers is Dependencies with every member of each in
// PerInstance (as Dependency's): one store read for them all.
func (c *Collector) DependenciesWithMembers() []cbdash.Dependency {
	deps := c.live.Dependencies()
	if !slices.ContainsFunc(deps, func(d cbdash.Dependency) bool { return d.Instances > len(d.PerInstance) }) {
		return deps
	}
	ctx, cancel := context.WithTimeout(context.Background(), membersTimeout)
	defer cancel()
	ibs, err := c.store.Instances(ctx)
	if err != nil {
		c.log.Warn("members served by other collectors: not read from the store", "err", err)
		return deps
	}
	by := map[cbdash.DependencyKey][]cbdash.InstanceBreaker{}
	for _, r := range ibs {
		k := cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker}
		by[k] = append(by[k], r)
	}
	for i := range deps {
		if deps[i].Instances > len(deps[i].PerInstance) {
			deps[i].PerInstance = c.storedLines(deps[i].PerInstance, by[deps[i].DependencyKey])
		}
	}
	return deps
}

// storedLines adds to lines (live state's, its own slice) a line of each
// stored instance breaker of ibs it has none of and that was seen within
// Config.GoneAfter (stale after Config.StaleAfter), in instance order.
func (c *Collector) storedLines(lines []*cbdash.InstanceBreaker, ibs []cbdash.InstanceBreaker) []*cbdash.InstanceBreaker {
	have := make(map[string]bool, len(lines))
	for _, l := range lines {
		have[l.Instance] = true
	}
	now := c.now()
	added := false
	for i := range ibs {
		if have[ibs[i].Instance] {
			continue
		}
		if r, ok := c.storedLine(ibs[i], now); ok {
			lines = append(lines, &r)
			added = true
		}
	}
	if added {
		slices.SortFunc(lines, func(a, b *cbdash.InstanceBreaker) int { return strings.Compare(a.Instance, b.Instance) })
	}
	return lines
}

// storedLine is stored instance breaker r as a line at now: false when
// it was not seen within Config.GoneAfter; stale when not within
// Config.StaleAfter, as live state's lines (the store's last-seen time is
// at most seenEvery, 5 s, behind an instance's last batch, well within
// the stale timeout).
func (c *Collector) storedLine(r cbdash.InstanceBreaker, now time.Time) (cbdash.InstanceBreaker, bool) {
	age := now.Sub(r.LastSeen)
	if age > c.cfg.GoneAfter {
		return r, false
	}
	r.Stale = age > c.cfg.StaleAfter
	r.Elsewhere = true
	if r.State == "" {
		r.State = protocol.StateClosed
	}
	// Lines are read as live state's are: never a nil window or
	// configuration (zero ones, shared and read-only like theirs).
	if r.Last == nil {
		r.Last = &noWindow
	}
	if r.Config == nil {
		r.Config = &noConfig
	}
	r.Shown.Failure, r.Shown.Slow = cbdash.LineRatesOf(&r, nil)
	if r.Held == nil && (r.State == protocol.StateForcedOpen || r.State == protocol.StateForcedClosed) {
		// Forced by a stored hold: the hold that governs it, as live
		// state finds it for a line whose forcing it did not see.
		action := protocol.ActionForceClosed
		if r.State == protocol.StateForcedOpen {
			action = protocol.ActionForceOpen
		}
		ref := cbdash.InstanceRef{Service: r.Service, Instance: r.Instance, Labels: r.Labels}
		if h, ok := c.holds.HoldFor(ref, r.Breaker, action); ok {
			r.Held = &h
		}
	}
	return r, true
}

// LinesElsewhere returns the lines of the instance breakers live state
// holds no line of (the instances other collectors serve, issue 36) as
// the store keeps them (store.Instances: state, labels, configuration,
// last transition, last seen; no window), those not seen within
// Config.GoneAfter left out, stale ones marked as live state marks its
// own; sorted by service, instance and breaker. Nil without a cluster
// (Config.Cluster nil or local: live state holds every line). What reads
// live lines and must see the fleet reads these too: the alerts of
// single instances (alert.Config.Members) and the instances a hold plan,
// its pre-flight and its refusals count (holds.Config.Elsewhere).
// Errors: the store's.
func (c *Collector) LinesElsewhere(ctx context.Context) ([]cbdash.InstanceBreaker, error) {
	if c.fleet == nil || c.fleet.solo {
		return nil, nil
	}
	ibs, err := c.store.Instances(ctx)
	if err != nil {
		return nil, err
	}
	type lineKey struct{ service, instance, breaker string }
	here := map[lineKey]bool{} // an instance may have lines here of some breakers only (Config.FullDetail's)
	for _, info := range c.live.Instances() {
		for _, b := range info.Breakers {
			here[lineKey{info.Ref.Service, info.Ref.Instance, b}] = true
		}
	}
	now := c.now()
	var out []cbdash.InstanceBreaker
	for _, r := range ibs {
		if here[lineKey{r.Service, r.Instance, r.Breaker}] {
			continue
		}
		if l, ok := c.storedLine(r, now); ok {
			out = append(out, l)
		}
	}
	return out, nil
}

// targets picks the instances of dependency k an operator command goes
// to, as live.State.Targets does (errors too), over every member: when
// other collectors serve some, over Dependency's lines (theirs from the
// store), so that a command issued here reaches them (routed, fleet.go).
func (c *Collector) targets(k cbdash.DependencyKey, instance string, share float64) ([]string, error) {
	local, err := c.live.Targets(k, instance, share)
	if err == nil && instance != "" {
		return local, nil
	}
	d, ok := c.live.Dependency(k)
	if !ok || d.Instances <= len(d.PerInstance) {
		return local, err
	}
	return targetsOf(k, c.withMembers(d).PerInstance, instance, share)
}

// targetsOf is live.State.Targets over lines.
func targetsOf(k cbdash.DependencyKey, lines []*cbdash.InstanceBreaker, instance string, share float64) ([]string, error) {
	var names []string
	for _, l := range lines {
		switch {
		case instance != "":
			if l.Instance == instance {
				return []string{instance}, nil
			}
		case share == 0 || share == 100 || (!l.Stale && cbdash.InShare(l.Instance, share)):
			names = append(names, l.Instance)
		}
	}
	switch {
	case instance != "":
		return nil, fmt.Errorf("instance %q of breaker %s: %w", instance, k, cbdash.ErrNotFound)
	case len(names) == 0:
		return nil, fmt.Errorf("no live instance of breaker %s falls in a %v%% share: %w", k, share, cbdash.ErrNotFound)
	}
	slices.Sort(names)
	return names, nil
}
