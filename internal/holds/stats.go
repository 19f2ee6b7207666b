package holds

import (
	"context"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// spanRetention is how long a finished cover span still counts late
// window reports (a report ends at most a report interval after the
// period it covers, plus delivery).
const spanRetention = time.Minute

type coverKey struct {
	k       Key
	breaker string
}

// coverSpan is a stretch of time a hold covered a breaker: window reports
// that end after from and start before to are counted for it.
type coverSpan struct {
	holdID   string
	from, to int64 // Unix ms; to = the hold's end
}

type statKey struct {
	holdID  string
	k       Key
	breaker string
}

// cover1 starts a cover span of a breaker; a span of the same hold that is
// still open goes on (a reconnection does not restart the count).
func (m *Manager) cover1(ck coverKey, sp coverSpan) {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	spans := m.cover[ck]
	for i := range spans {
		if spans[i].to > sp.from {
			if spans[i].holdID == sp.holdID {
				return
			}
			spans[i].to = sp.from // another hold governs from now on
		}
	}
	m.cover[ck] = append(spans, sp)
}

// endSpans ends every span of hold id at at (its release).
func (m *Manager) endSpans(id string, at time.Time) {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	for ck, spans := range m.cover {
		for i := range spans {
			if spans[i].holdID == id && spans[i].to > at.UnixMilli() {
				spans[i].to = at.UnixMilli()
			}
		}
		m.cover[ck] = spans
	}
}

// pruneSpans forgets spans that ended more than spanRetention ago.
func (m *Manager) pruneSpans(now time.Time) {
	cut := now.Add(-spanRetention).UnixMilli()
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	for ck, spans := range m.cover {
		kept := spans[:0]
		for _, sp := range spans {
			if sp.to > cut {
				kept = append(kept, sp)
			}
		}
		if len(kept) == 0 {
			delete(m.cover, ck)
		} else {
			m.cover[ck] = kept
		}
	}
	// Counts of holds no span refers to any more are final and saved.
	referenced := make(map[string]bool)
	for _, spans := range m.cover {
		for _, sp := range spans {
			referenced[sp.holdID] = true
		}
	}
	for sk := range m.stats {
		if !referenced[sk.holdID] && !m.dirty[sk.holdID] {
			delete(m.stats, sk)
		}
	}
	for sk := range m.recent {
		if !referenced[sk.holdID] {
			delete(m.recent, sk)
		}
	}
	for id := range m.since {
		if !referenced[id] {
			delete(m.since, id)
		}
	}
}

// Observe counts the window reports ws of instance k for the holds
// covering their breakers: a report counts for a hold when its period ends
// after the hold was sent to the breaker and starts before the hold ended.
// Call it with each stored batch, after its commit (a resent batch is not
// stored, nor counted, twice). It takes only the statistics' lock, so the
// store's goroutine may call it.
func (m *Manager) Observe(k Key, ws []protocol.Window) {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	if len(m.cover) == 0 {
		return
	}
	sec := slotOf(m.now())
	for i := range ws {
		w := &ws[i]
		for _, sp := range m.cover[coverKey{k, w.Breaker}] {
			if w.Start+w.Millis <= sp.from || w.Start >= sp.to {
				continue
			}
			sk := statKey{sp.holdID, k, w.Breaker}
			st := m.stats[sk]
			if st == nil {
				st = &cbdash.HoldCounts{Service: k.Service, Instance: k.Instance, Breaker: w.Breaker}
				m.stats[sk] = st
			}
			st.AddWindow(*w)
			m.dirty[sp.holdID] = true
			r := m.recent[sk]
			if r == nil {
				r = &recentCounts{}
				m.recent[sk] = r
			}
			r.add(sec, *w)
		}
	}
}

// FlushStats saves the counts of holds that changed since the last save;
// a store error is logged and the counts are saved again next time.
func (m *Manager) FlushStats(ctx context.Context) {
	m.statsMu.Lock()
	byHold := make(map[string][]cbdash.HoldCounts, len(m.dirty))
	for sk, st := range m.stats {
		if m.dirty[sk.holdID] {
			c := *st
			c.Latency = append([]int64(nil), st.Latency...)
			byHold[sk.holdID] = append(byHold[sk.holdID], c)
		}
	}
	m.dirty = make(map[string]bool)
	m.statsMu.Unlock()
	for id, rows := range byHold {
		if err := m.cfg.Store.SaveHoldStats(ctx, id, m.cfg.Collector, rows); err != nil {
			if ctx.Err() == nil {
				m.log.Error("save hold stats", "hold", id, "err", err)
			}
			m.statsMu.Lock()
			m.dirty[id] = true
			m.statsMu.Unlock()
		}
	}
}

// Counts returns the counts of hold id this collector made, as they are
// now in memory (the store's may lag by a sweep), sorted by service,
// instance and breaker; nil when none are in memory. Other collectors'
// are in the store (countsOf sums them).
func (m *Manager) Counts(id string) []cbdash.HoldCounts {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	var out []cbdash.HoldCounts
	for sk, st := range m.stats {
		if sk.holdID == id {
			c := *st
			c.Latency = append([]int64(nil), st.Latency...)
			out = append(out, c)
		}
	}
	cbdash.SortHoldCounts(out)
	return out
}

// countsOf returns what the instance breakers covered by hold id counted
// on every collector: this one's from memory (its store rows when none
// are in memory) plus the other collectors' rows in the store, merged
// per instance breaker (cbdash.MergeHoldCounts). Errors: the store's.
func (m *Manager) countsOf(ctx context.Context, id string) ([]cbdash.HoldCounts, error) {
	by, err := m.cfg.Store.HoldStatsByCollector(ctx, id)
	if err != nil {
		return nil, err
	}
	rows := m.Counts(id)
	if rows == nil {
		rows = by[m.cfg.Collector]
	}
	for c, rs := range by {
		if c != m.cfg.Collector {
			rows = append(rows, rs...)
		}
	}
	return cbdash.MergeHoldCounts(rows), nil
}
