package alert

import (
	"context"
	"time"

	"github.com/cbdash/cbdash"
)

// Several collectors, one fleet (issue 36). The live feed's dependencies
// count every instance (their totals and states are the fleet's), but
// their PerInstance lines are those of the instances served by this
// collector only. The rules about single instances (stale, half-open too
// long) also read the lines of the instances other collectors serve, as
// the store keeps them (Config.Members): their state, last transition and
// last-seen time, written by the collector serving them (the last-seen
// time at most every 5 s, well within the stale timeout).

// Members gives the lines of the instance breakers served by other
// collectors (*collector.Collector's LinesElsewhere): Stale set as the
// collector sets its own lines', those gone left out; none without a
// cluster. It does I/O; errors are the store's.
type Members interface {
	LinesElsewhere(ctx context.Context) ([]cbdash.InstanceBreaker, error)
}

// MembersEvery is how often the Service reads Members while a stale or
// half-open rule is enabled: the store's last-seen times move at most
// every 5 s.
const MembersEvery = 5 * time.Second

// WatchesInstances reports whether an enabled rule is about single
// instances (stale, half-open too long).
func (e *Engine) WatchesInstances() bool {
	for _, r := range e.rules {
		if r.Kind == cbdash.AlertStale || r.Kind == cbdash.AlertHalfOpenLong {
			return true
		}
	}
	return false
}

// LoadElsewhere replaces the lines of the instances other collectors
// serve (Members), which the stale and half-open rules read beside each
// dependency's PerInstance.
func (e *Engine) LoadElsewhere(lines []cbdash.InstanceBreaker) {
	clear(e.elsewhere)
	for i := range lines {
		l := &lines[i]
		k := cbdash.DependencyKey{Service: l.Service, Breaker: l.Breaker}
		e.elsewhere[k] = append(e.elsewhere[k], l)
	}
}

// linesOf is the lines of dependency k: d's PerInstance (served here)
// and those of instances served elsewhere that d has none of.
func (e *Engine) linesOf(k cbdash.DependencyKey, d cbdash.Dependency) []*cbdash.InstanceBreaker {
	there := e.elsewhere[k]
	if len(there) == 0 {
		return d.PerInstance
	}
	here := make(map[string]bool, len(d.PerInstance))
	for _, l := range d.PerInstance {
		here[l.Instance] = true
	}
	out := append([]*cbdash.InstanceBreaker(nil), d.PerInstance...)
	for _, l := range there {
		if !here[l.Instance] { // moved here since the read: the live line is newer
			out = append(out, l)
		}
	}
	return out
}

// keysWithLines is the dependencies rule r watches that have lines: those
// of the live feed, and those only instances served elsewhere have lines
// of (a dependency another collector's summaries no longer count).
func (e *Engine) keysWithLines(r cbdash.AlertRule) map[cbdash.DependencyKey]cbdash.Dependency {
	out := make(map[cbdash.DependencyKey]cbdash.Dependency, len(e.deps))
	for k, d := range e.deps {
		if matches(r, k) {
			out[k] = d
		}
	}
	for k := range e.elsewhere {
		if _, ok := out[k]; !ok && matches(r, k) {
			out[k] = cbdash.Dependency{DependencyKey: k}
		}
	}
	return out
}

// readMembers gives the engine Members' lines, at most every
// MembersEvery while a rule about single instances is enabled. The read
// is made without the engine's lock; a failed one is logged and the
// lines read before stay.
func (s *Service) readMembers(ctx context.Context) {
	if s.cfg.Members == nil {
		return
	}
	now := s.cfg.Clock.Now()
	if !s.membersRead.IsZero() && now.Sub(s.membersRead) < MembersEvery {
		return
	}
	s.mu.Lock()
	watch := s.engine.WatchesInstances()
	s.mu.Unlock()
	if !watch {
		return
	}
	s.membersRead = now
	lines, err := s.cfg.Members.LinesElsewhere(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Error("alert: read the instances other collectors serve", "err", err)
		}
		return
	}
	s.mu.Lock()
	s.engine.LoadElsewhere(lines)
	s.mu.Unlock()
}
