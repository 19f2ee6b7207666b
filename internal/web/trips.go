package web

import (
	"context"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// tripLookback bounds how many of a dependency's newest transitions are
// searched for the trips of its open instances.
const tripLookback = 200

// trips maps an open or half-open dependency to the cause of each of its
// instances' last trip (closed > open on a failure or slow-call rate),
// by instance name.
type trips map[cbdash.DependencyKey]map[string]protocol.Cause

// tripped reports whether a state is one a breaker reaches by tripping.
func tripped(state string) bool { return cbdash.Tripped(state) }

// trips gives, for each open or half-open dependency of deps, the causes
// of its instances' last trips: from the live state (the collector keeps
// each instance's last trip), and from the store (one query for that
// dependency) only when a tripped instance's trip was not seen live, as
// after a restart. A store error leaves that dependency out (its view
// falls back to the last minute's rates).
func (s *Server) trips(ctx context.Context, deps []cbdash.Dependency) trips {
	out := trips{}
	for _, d := range deps {
		if !tripped(d.State) {
			continue
		}
		m, missing := map[string]protocol.Cause{}, false
		for _, in := range d.PerInstance {
			if t := in.LastTrip; t != nil && (t.Cause.Kind == protocol.CauseFailureRate || t.Cause.Kind == protocol.CauseSlowCallRate) {
				m[in.Instance] = t.Cause
			} else if !in.Stale && tripped(in.State) {
				missing = true
			}
		}
		if missing {
			recs, err := s.history.Transitions(ctx, cbdash.TransitionQuery{Service: d.Service, Breaker: d.Breaker, Limit: tripLookback})
			if err == nil {
				for inst, c := range tripCauses(recs) {
					if _, ok := m[inst]; !ok {
						m[inst] = c
					}
				}
			}
		}
		if len(m) > 0 {
			out[d.DependencyKey] = m
		}
	}
	return out
}

// tripCauses picks from recs (newest first) each instance's last
// closed > open transition caused by a rate.
func tripCauses(recs []cbdash.TransitionRecord) map[string]protocol.Cause {
	m := map[string]protocol.Cause{}
	for _, r := range recs {
		if _, seen := m[r.Instance]; seen || r.From != protocol.StateClosed || r.To != protocol.StateOpen {
			continue
		}
		if r.Cause.Kind == protocol.CauseFailureRate || r.Cause.Kind == protocol.CauseSlowCallRate {
			m[r.Instance] = r.Cause
		}
	}
	return m
}
