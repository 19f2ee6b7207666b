package holds

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// A drill is a force-open hold with stop conditions (its own or the
// server's defaults). Before one starts, pre-flight refuses it while one
// of its stop conditions is already breached on the target (on the last
// window report of each matching breaker), while an incident is open on a
// dependency it covers, or while another drill covers one. A hold without
// stop conditions (an operator's own force open, say during an incident,
// with the defaults dropped for a reason) and a force closed are not
// drills and are never refused.

// isDrill reports whether a hold of req with stop conditions stops is a
// drill, which pre-flight checks.
func isDrill(req cbdash.HoldRequest, stops []cbdash.StopCondition) bool {
	return req.Action == protocol.ActionForceOpen && len(stops) > 0
}

// Preflight returns why a drill of req must not start now, one reason a
// line (none: it may). Errors: cbdash.ErrInvalid as Create, or the
// store's (reading open incidents).
func (m *Manager) Preflight(ctx context.Context, req cbdash.HoldRequest) ([]string, error) {
	stops, err := cbdash.EffectiveStops(m.cfg.DefaultStops, req.DropStops, req.StopIf)
	if err != nil {
		return nil, err
	}
	if !isDrill(req, stops) {
		return nil, nil
	}
	now := m.now().UTC()
	reasons := m.otherDrills(req.Selector, now)
	incidents, err := m.openIncidents(ctx, req.Selector)
	if err != nil {
		return nil, err
	}
	reasons = append(reasons, incidents...)
	return append(reasons, m.breachedNow(req.Selector, stops)...), nil
}

// refusePreflight is Create's pre-flight: cbdash.ErrConflict with the
// reasons when there are any.
func (m *Manager) refusePreflight(ctx context.Context, req cbdash.HoldRequest) error {
	reasons, err := m.Preflight(ctx, req)
	if err != nil {
		return err
	}
	if len(reasons) > 0 {
		return fmt.Errorf("%w: drill refused by pre-flight: %s", cbdash.ErrConflict, strings.Join(reasons, "; "))
	}
	return nil
}

// overlap reports whether selectors a and b can cover the same
// dependency (narrowings aside).
func overlap(a, b cbdash.Selector) bool {
	return a.Breaker == b.Breaker && (a.Service == b.Service || a.Service == cbdash.AnyService || b.Service == cbdash.AnyService)
}

// otherDrills is a reason for each live drill whose selector overlaps
// sel's.
func (m *Manager) otherDrills(sel cbdash.Selector, now time.Time) []string {
	m.mu.Lock()
	others := m.listLocked()
	m.mu.Unlock()
	sortNewestFirst(others)
	var out []string
	for _, h := range others {
		if h.LiveAt(now) && isDrill(h.HoldRequest, h.Stops) && overlap(h.Selector, sel) {
			out = append(out, fmt.Sprintf("drill %s (%s) covers it until %s: wait for it to end, or release it first (cbdash release %s)",
				h.ID, h.Selector.String(), h.Until.UTC().Format("15:04:05 UTC"), h.ID))
		}
	}
	return out
}

// openIncidents is a reason for each open incident on a dependency sel
// covers.
func (m *Manager) openIncidents(ctx context.Context, sel cbdash.Selector) ([]string, error) {
	q := cbdash.IncidentQuery{Breaker: sel.Breaker, OpenOnly: true, Limit: 20}
	if sel.Service != cbdash.AnyService {
		q.Service = sel.Service
	}
	incs, err := m.cfg.Store.Incidents(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("pre-flight: open incidents: %w", err)
	}
	var out []string
	for _, in := range incs {
		if in.Open && sel.CoversDependency(in.DependencyKey) {
			out = append(out, fmt.Sprintf("incident %d is open on %s since %s: %s", in.ID, in.DependencyKey, in.Start.UTC().Format("15:04:05 UTC"),
				m.insteadOfADrill("wait for it to end (the Incidents page, or cbdash incidents)")))
		}
	}
	return out, nil
}

// insteadOfADrill is the advice of a refusal: wait (what to wait for),
// or, when a hold and not a drill is meant, hold without stop
// conditions (the server's defaults dropped with a reason, when it has
// some). One text for the API, the CLI and the holds page.
func (m *Manager) insteadOfADrill(wait string) string {
	without := "without stop conditions (no --stop-if)"
	if len(m.cfg.DefaultStops) > 0 {
		without = "without stop conditions (no --stop-if, and the server's defaults dropped: --drop-stop-if '*' --drop-reason ...)"
	}
	return wait + "; or, to hold it anyway (a hold, not a drill), force it open " + without
}

// breachedNow is a reason for each stop condition already above its value
// on the last window reports of the live breakers sel matches: those of
// the instances served here, and the sums of the instances other
// collectors serve (Elsewhere's parts sel covers whole; of a part sel
// narrows by instance, share or labels not every member has, nothing is
// known here).
func (m *Manager) breachedNow(sel cbdash.Selector, stops []cbdash.StopCondition) []string {
	var sum cbdash.HoldCounts
	for _, inst := range m.cfg.Instances.HoldInstances() {
		if inst.Stale {
			continue
		}
		for b, c := range inst.Last {
			if sel.Matches(inst.Ref, b) {
				sum.Counts.Add(c)
			}
		}
	}
	for _, p := range m.partsCovered(sel) {
		sum.Counts.Add(p.Last)
	}
	var out []string
	for _, c := range stops {
		if v, ok := stopValue(c, sum, cbdash.StopMinCalls); ok && v > c.Above {
			out = append(out, fmt.Sprintf("stop condition %s is already breached on the target: %s now: %s", c.String(), c.Figure(v),
				m.insteadOfADrill("wait until it is below its value")))
		}
	}
	return out
}
