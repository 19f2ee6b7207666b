package holds

import (
	"context"

	"github.com/cbdash/cbdash"
)

// Sweep forgets expired holds and applies, to the breakers they governed,
// whatever governs them now (an older, longer hold; or nothing: the agent
// has ended the forced state itself). It saves the counts of holds and
// forgets cover spans that ended more than a minute ago. The collector
// calls it every second.
func (m *Manager) Sweep(ctx context.Context) {
	now := m.now()
	done := m.change()
	defer done()
	m.mu.Lock()
	ended := false
	for id, h := range m.holds {
		if !now.Before(h.Until) {
			m.forgetLocked(id)
			ended = true
		}
	}
	var keys []Key
	if ended {
		m.gen++
		for k, bs := range m.applied {
			for _, a := range bs {
				if _, live := m.holds[a.holdID]; !live {
					keys = append(keys, k)
					break
				}
			}
		}
	}
	m.mu.Unlock()
	m.reconcileAll(ctx, sortKeys(keys), m.known) // forgets what was applied of the ended holds
	done()
	m.FlushStats(ctx)
	m.pruneSpans(now)
}

// Adopt takes holds another collector created or released (as stored)
// and applies them to the instances connected here. Holds already known
// as they are, and expired ones, are skipped. A new one's coverage is
// taken as Restore takes it: an instance the other collector applied it
// to that fails over here is a reconnection (the same command again),
// and what it counts here counts from when the hold first reached it.
func (m *Manager) Adopt(ctx context.Context, hs []cbdash.HoldRecord) {
	now := m.now()
	done := m.change()
	defer done()
	m.mu.Lock()
	changed := false
	for _, h := range hs {
		cov := h.Coverage
		h.Coverage = nil
		if !now.Before(h.Until) {
			continue
		}
		old, known := m.holds[h.ID]
		if known && old.ReleasedAt.Equal(h.ReleasedAt) {
			continue
		} else if known {
			h.Step = max(h.Step, old.Step) // the step this collector let it reach
		}
		m.keepLocked(h)
		if !known {
			for _, cv := range cov {
				m.restoreCoverageLocked(h, cv)
			}
		}
		if !h.ReleasedAt.IsZero() {
			m.endSpans(h.ID, h.ReleasedAt)
		}
		changed = true
	}
	if changed {
		m.gen++
	}
	m.mu.Unlock()
	if !changed {
		return
	}
	m.reconcileReachable(ctx)
}

// reconcileReachable applies the holds to every reachable instance.
func (m *Manager) reconcileReachable(ctx context.Context) {
	var keys []Key
	for _, inst := range m.cfg.Instances.HoldInstances() {
		if inst.Reachable() {
			keys = append(keys, inst.key())
		}
	}
	m.reconcileAll(ctx, keys, func(k Key) (Instance, bool) {
		inst, ok := m.cfg.Instances.HoldInstance(k)
		return inst, ok && inst.Reachable()
	})
}

// Restore loads from the store the holds that have not expired (up to
// 5,000), what was applied where (their coverage), and what they counted
// so far. Call it once, before the Manager is used. Errors: the store's.
func (m *Manager) Restore(ctx context.Context) error {
	now := m.now()
	hs, err := m.cfg.Store.Holds(ctx, cbdash.HoldQuery{Limit: 5000})
	if err != nil {
		return err
	}
	var live []cbdash.HoldRecord
	stats := make(map[string][]cbdash.HoldCounts)
	for _, h := range hs {
		if !now.Before(h.Until) {
			continue
		}
		live = append(live, h)
		by, err := m.cfg.Store.HoldStatsByCollector(ctx, h.ID)
		if err != nil {
			return err
		}
		stats[h.ID] = by[m.cfg.Collector] // this collector's running totals go on; others' stay theirs
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range live {
		cov := h.Coverage
		h.Coverage = nil
		m.keepLocked(h)
		for _, cv := range cov {
			m.restoreCoverageLocked(h, cv)
		}
		m.statsMu.Lock()
		for _, s := range stats[h.ID] {
			m.stats[statKey{h.ID, Key{s.Service, s.Instance}, s.Breaker}] = &s
		}
		m.statsMu.Unlock()
	}
	return nil
}

// restoreCoverageLocked records coverage row cv of hold h as applied,
// unless a later process, or a hold that supersedes h, was applied there.
func (m *Manager) restoreCoverageLocked(h cbdash.HoldRecord, cv cbdash.HoldCoverage) {
	k := Key{cv.Service, cv.Instance}
	if m.applied[k] == nil {
		m.applied[k] = make(map[string]appliedHold)
	}
	if prev, ok := m.applied[k][cv.Breaker]; ok && prev.startedAt > cv.StartedAt {
		return
	} else if ok && prev.startedAt == cv.StartedAt && !m.holds[prev.holdID].Superseded(h) {
		return
	}
	m.applied[k][cv.Breaker] = appliedHold{holdID: h.ID, created: h.CreatedAt, cmdID: cv.CommandID, startedAt: cv.StartedAt}
	m.cover1(coverKey{k, cv.Breaker}, coverSpan{holdID: h.ID, from: cv.CoveredAt.UnixMilli(), to: h.End().UnixMilli()})
}
