package holds

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Stop conditions (cbdash.StopCondition) are checked four times a second
// (CheckStops) on what the Manager already counts for drill statistics:
// the window reports of the covered breakers, kept by the quarter second
// of their arrival for the last cbdash.StopWindow (recentCounts). A
// breach releases the hold at once, recording the breach, and publishes a
// cbdash.EventDrillStopped for the alert rules.

// slot is the width of a recentCounts slot; recentSlots slots (one more
// than cbdash.StopWindow holds, so that the window is never shorter than
// StopWindow however far into the current slot the check is) are summed.
const (
	slot        = 250 * time.Millisecond
	recentSlots = int64(cbdash.StopWindow/slot) + 1
	ringSlots   = recentSlots + 2
)

// recentCounts is what one covered instance breaker counted in each of the
// last slots (by the collector's clock at arrival).
type recentCounts struct {
	slots [ringSlots]int64
	c     [ringSlots]cbdash.HoldCounts
}

// slotOf is the slot of t.
func slotOf(t time.Time) int64 { return t.UnixMilli() / slot.Milliseconds() }

// add counts w in slot n.
func (r *recentCounts) add(n int64, w protocol.Window) {
	i := n % ringSlots
	if i < 0 {
		i += ringSlots
	}
	if r.slots[i] != n {
		r.slots[i], r.c[i] = n, cbdash.HoldCounts{}
	}
	r.c[i].AddWindow(w)
}

// sumInto adds the recentSlots slots up to slot now to into.
func (r *recentCounts) sumInto(now int64, into *cbdash.HoldCounts) {
	for i, n := range r.slots {
		if n > now-recentSlots && n <= now {
			into.Counts.Add(r.c[i].Counts)
			into.AddWindow(protocol.Window{Latency: r.c[i].Latency})
		}
	}
}

// stopValue is c's metric over counts hc; ok is false below minCalls
// (rejected calls for the fallback failure rate, calls for the error
// rate, admitted calls for p99).
func stopValue(c cbdash.StopCondition, hc cbdash.HoldCounts, minCalls int64) (v float64, ok bool) {
	switch c.Metric {
	case cbdash.StopFallbackFailureRate:
		rej := hc.Counts.Rejected()
		if rej < minCalls || rej == 0 {
			return 0, false
		}
		return 100 * float64(min(hc.Counts.FallbackFailure, rej)) / float64(rej), true
	case cbdash.StopErrorRate:
		p := cbdash.NewHoldPeriod(hc.Counts, nil)
		return p.ErrorRate, p.Calls >= minCalls && p.Calls > 0
	case cbdash.StopP99:
		if hc.Counts.Admitted < minCalls {
			return 0, false
		}
		return protocol.QuantileMillis(hc.Latency, 0.99)
	}
	return 0, false
}

// CheckStops checks the stop conditions of every live hold and stops
// (releases everywhere at once, recording the breach) each hold one of
// whose conditions is breached. The collector calls it four times a
// second (a breach is acted on within a quarter second of the report that
// shows it).
func (m *Manager) CheckStops(ctx context.Context) {
	now := m.now().UTC()
	stopped := map[string]bool{}
	for _, h := range m.watched(now) {
		if b, ok := m.breached(h, now); ok {
			m.stop(ctx, h, b)
			stopped[h.ID] = true
		}
	}
	m.advanceSteps(ctx, now, stopped)
}

// advanceSteps lets each live stepped hold not in stopped reach the step
// its time has come to (cbdash.StepAt), once its stop conditions were
// checked, and applies it to every reachable instance: the next step's
// instances are covered only then.
func (m *Manager) advanceSteps(ctx context.Context, now time.Time, stopped map[string]bool) {
	if len(m.stepsDue(now, stopped, false)) == 0 { // most of the time: no change to take
		return
	}
	done := m.change()
	defer done()
	if len(m.stepsDue(now, stopped, true)) > 0 {
		m.reconcileReachable(ctx)
	}
}

// stepsDue returns the live stepped holds not in stopped whose next step
// is due at now; with advance, it lets them reach it.
func (m *Manager) stepsDue(now time.Time, stopped map[string]bool, advance bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, h := range m.holds {
		if len(h.Steps) == 0 || stopped[id] || !h.LiveAt(now) {
			continue
		}
		due, _ := cbdash.StepAt(h.Steps, now.Sub(h.CreatedAt))
		if due <= max(h.Step, 1) {
			continue
		}
		ids = append(ids, id)
		if advance {
			h.Step = due
			m.keepLocked(h)
			m.gen++
			m.log.Info("drill step", "hold", id, "step", due, "share", h.Covering().Share)
		}
	}
	return ids
}

// watched returns the live holds with stop conditions.
func (m *Manager) watched(now time.Time) []cbdash.HoldRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cbdash.HoldRecord
	for _, h := range m.holds {
		if len(h.Stops) > 0 && h.LiveAt(now) {
			out = append(out, h)
		}
	}
	sortNewestFirst(out)
	return out
}

// breached returns the first of h's stop conditions that is breached at
// now: its metric over the last cbdash.StopWindow is above its value, and
// has been at every check for its For.
func (m *Manager) breached(h cbdash.HoldRecord, now time.Time) (cbdash.HoldBreach, bool) {
	total, per := m.recentSums(h.ID, now)
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	if m.since[h.ID] == nil {
		m.since[h.ID] = make(map[int]time.Time)
	}
	for i, c := range h.Stops {
		v, ok := stopValue(c, total, cbdash.StopMinCalls)
		if !ok || v <= c.Above {
			delete(m.since[h.ID], i)
			continue
		}
		since, seen := m.since[h.ID][i]
		if !seen {
			since = now
			m.since[h.ID][i] = now
		}
		if now.Sub(since) >= c.For {
			b := cbdash.HoldBreach{Condition: c, Value: v, At: now, Instances: worst(c, per)}
			if len(h.Steps) > 0 {
				b.Step = max(h.Step, 1)
			}
			return b, true
		}
	}
	return cbdash.HoldBreach{}, false
}

// recentSums sums the recent counts of hold id's covered breakers, in
// all and by "service/instance".
func (m *Manager) recentSums(id string, now time.Time) (cbdash.HoldCounts, map[string]*cbdash.HoldCounts) {
	sec := slotOf(now)
	var total cbdash.HoldCounts
	per := make(map[string]*cbdash.HoldCounts)
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	for sk, r := range m.recent {
		if sk.holdID != id {
			continue
		}
		name := sk.k.Service + "/" + sk.k.Instance
		if per[name] == nil {
			per[name] = &cbdash.HoldCounts{}
		}
		r.sumInto(sec, per[name])
		r.sumInto(sec, &total)
	}
	return total, per
}

// worst lists the instances whose own figure is above c's value, the
// worst first (ties by name), at most 5.
func worst(c cbdash.StopCondition, per map[string]*cbdash.HoldCounts) []string {
	type fig struct {
		name string
		v    float64
	}
	var above []fig
	for name, hc := range per {
		if v, ok := stopValue(c, *hc, 1); ok && v > c.Above {
			above = append(above, fig{name, v})
		}
	}
	slices.SortFunc(above, func(a, b fig) int { return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.name, b.name)) })
	out := []string{}
	for _, f := range above[:min(len(above), 5)] {
		out = append(out, f.name)
	}
	return out
}

// stop releases h for breach b and tells the alert rules. A hold another
// collector stopped or released first is left as it is.
func (m *Manager) stop(ctx context.Context, h cbdash.HoldRecord, b cbdash.HoldBreach) {
	stopped, err := m.release(ctx, h.ID, cbdash.StopActor, b.Reason(), &b)
	m.statsMu.Lock()
	delete(m.since, h.ID)
	m.statsMu.Unlock()
	switch {
	case errors.Is(err, cbdash.ErrConflict):
		return
	case err != nil:
		if ctx.Err() == nil {
			m.log.Error("stop hold", "hold", h.ID, "breach", b.Reason(), "err", err)
		}
		return
	}
	m.log.Info("drill stopped", "hold", h.ID, "selector", h.Selector.String(), "reason", b.Reason(), "instances", b.Instances)
	m.cfg.Events.Publish(cbdash.Event{Kind: cbdash.EventDrillStopped, At: b.At, Hold: &stopped})
}
