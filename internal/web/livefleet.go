package web

import (
	"maps"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

// fleetIndex is every dependency's latest view, shared by a server's live
// overviews: one subscription to the collector for all of them, kept by
// one goroutine, instead of one each. A live overview reads it at its
// flushes (which dependencies are on its page, the page's views, the
// counters) and keeps only its page; so an overview socket costs a page,
// not a fleet, and a fleet's events go through one channel, not one per
// socket. The views are the collector's, shared and immutable: a view
// that changed is a new pointer. Safe for concurrent use.
type fleetIndex struct {
	mu   sync.RWMutex
	deps map[cbdash.DependencyKey]*cbdash.Dependency
	// ver moves with every change; gen with the changes that can move a
	// tile across a page's edge for some filter: a dependency that comes
	// (or is seen again from a fresh snapshot), or changes its state
	// rank, its service's or labels.
	ver, gen uint64
	ready    chan struct{} // closed once the first snapshot is in
	// moved is closed (and replaced) when a dependency's state changes:
	// the overviews flush at once rather than at their next tick, so a
	// transition reaches the tiles without waiting up to LiveInterval.
	moved chan struct{}

	fleetMu  sync.Mutex
	fleet    templates.Fleet // the counters as of fleetVer
	fleetVer uint64
}

func newFleetIndex() *fleetIndex {
	return &fleetIndex{deps: map[cbdash.DependencyKey]*cbdash.Dependency{}, ready: make(chan struct{}), moved: make(chan struct{})}
}

// fleetIndex returns the server's index, started by the first live
// overview; it follows the collector until the server closes.
func (s *Server) fleetIndex() *fleetIndex {
	s.slots.indexOnce.Do(func() {
		s.slots.index = newFleetIndex()
		go s.slots.index.follow(s)
	})
	return s.slots.index
}

// follow keeps ix current until s closes: a snapshot, then its events;
// when the collector drops the subscription as too slow, a fresh
// snapshot after resubscribePause.
func (ix *fleetIndex) follow(s *Server) {
	for {
		snapshot, events, cancel := s.subscribe()
		ix.reset(snapshot)
		snapshot = nil
	apply:
		for {
			select {
			case <-s.done:
				cancel()
				return
			case ev, ok := <-events:
				if !ok {
					break apply
				}
				ix.apply(ev)
			}
		}
		cancel()
		pause := time.NewTimer(resubscribePause)
		select {
		case <-s.done:
			pause.Stop()
			return
		case <-pause.C:
		}
	}
}

// reset replaces every view with snapshot's.
func (ix *fleetIndex) reset(snapshot []*cbdash.Dependency) {
	deps := make(map[cbdash.DependencyKey]*cbdash.Dependency, len(snapshot))
	for _, d := range snapshot {
		deps[d.DependencyKey] = d
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deps = deps
	ix.ver++
	ix.gen++
	select {
	case <-ix.ready:
	default:
		close(ix.ready)
	}
}

// apply takes in a dependency's new view.
func (ix *fleetIndex) apply(ev cbdash.Event) {
	if ev.Kind != cbdash.EventDependency || ev.Dependency == nil {
		return
	}
	d := ev.Dependency
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := ix.deps[d.DependencyKey]
	ix.deps[d.DependencyKey] = d
	ix.ver++
	if old == nil || stateRank(old.State) != stateRank(d.State) || !maps.Equal(old.Labels, d.Labels) {
		ix.gen++
	}
	if old == nil || old.State != d.State || !maps.Equal(old.ByState, d.ByState) {
		close(ix.moved)
		ix.moved = make(chan struct{})
	}
}

// stateMoved is closed at the next change of a dependency's state (or of
// how many instances are in each).
func (ix *fleetIndex) stateMoved() <-chan struct{} {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.moved
}

// versions returns ver and gen.
func (ix *fleetIndex) versions() (ver, gen uint64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.ver, ix.gen
}

// all lists every view, with ver and gen as of the list.
func (ix *fleetIndex) all() (all []*cbdash.Dependency, ver, gen uint64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	all = make([]*cbdash.Dependency, 0, len(ix.deps))
	for _, d := range ix.deps {
		all = append(all, d)
	}
	return all, ix.ver, ix.gen
}

// views returns the current view of each of keys (nil for one gone).
func (ix *fleetIndex) views(keys []cbdash.DependencyKey) []*cbdash.Dependency {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]*cbdash.Dependency, len(keys))
	for i, k := range keys {
		out[i] = ix.deps[k]
	}
	return out
}

// counters returns the fleet's counters, worked out once per change
// whatever the number of overviews asking.
func (ix *fleetIndex) counters() templates.Fleet {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.fleetMu.Lock()
	defer ix.fleetMu.Unlock()
	if ix.fleetVer != ix.ver || ix.fleetVer == 0 {
		ix.fleet = fleetCount(len(ix.deps), maps.Values(ix.deps))
		ix.fleetVer = ix.ver
	}
	return ix.fleet
}
