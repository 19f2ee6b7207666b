package incident

import (
	"slices"
	"time"

	"github.com/cbdash/cbdash"
)

// Resume starts a Detector after a handover or a restart (call it once,
// instead of Restore, before Observe). open are the incidents the store
// holds open; stored are the stored transitions the previous leader may
// not have processed, oldest first (by At, then ID), together with every
// stored transition of an open incident's dependency since its start;
// snapshot is the collector's live state, now the time.
//
// The open incidents are rebuilt from their stored transitions: their
// instances and start are kept and joined by what the transitions show,
// and their opens count is the larger of the stored count and the trips
// replayed (a replay counts no trip twice). Transitions are fed in order,
// each after closing the incidents whose quiet period had passed at its
// time, so trips that opened and closed while no leader ran get their
// incident. The snapshot then gives the states of instances no transition
// named. An incident all of whose instances are closed starts its quiet
// period at the last stored close (the transitions' At), or at now when
// no close is stored. It returns the changes, as Observe and Tick do,
// including the closes due at now.
func (d *Detector) Resume(open []cbdash.Incident, stored []cbdash.TransitionRecord, snapshot []cbdash.Dependency, now time.Time) []Change {
	storedOpens := make(map[cbdash.DependencyKey]int, len(open))
	for _, inc := range open {
		s := d.dep(inc.DependencyKey)
		c := inc
		c.Instances = slices.Clone(inc.Instances)
		slices.Sort(c.Instances)
		storedOpens[inc.DependencyKey] = c.Opens
		c.Opens = 0
		s.inc = &c
	}
	var out []Change
	for _, tr := range stored {
		out = append(out, d.Tick(time.UnixMilli(tr.At).UTC())...)
		out = append(out, d.observeTransition(tr)...)
	}
	for _, dep := range snapshot {
		out = append(out, d.observeDependency(dep, now)...)
	}
	for k, s := range d.deps {
		if s.inc == nil {
			continue
		}
		if n := storedOpens[k]; n > s.inc.Opens && s.inc.ID != 0 {
			s.inc.Opens = n
		}
		// The states are complete only now: an instance down since before
		// the replayed transitions came from the snapshot.
		switch {
		case s.anyDown():
			s.closedSince = time.Time{}
		case !s.lastUp.IsZero():
			s.closedSince = s.lastUp
		case s.closedSince.IsZero():
			s.closedSince = now
		}
	}
	out = append(out, d.Tick(now)...)
	// A stored incident's changes carry at least its stored opens: the
	// replay counted its trips from zero.
	for i, c := range out {
		if n, ok := storedOpens[c.Incident.DependencyKey]; ok && c.Incident.ID != 0 && n > c.Incident.Opens {
			out[i].Incident.Opens = n
		}
	}
	return out
}

// Late feeds transitions that reach the detector after newer ones of the
// same instance breakers (stored ones a takeover saw neither in the store
// nor on the live feed, with the closes seen since, which Late feeds
// again), oldest first (by At, then ID). They count as Observe counts
// them: a trip opens or joins its dependency's incident at its time, a
// close starts the quiet period at its time. An instance for which
// stillDown reports true (a trip newer than every transition given was
// seen of it) keeps the state the detector had before Late. The caller
// must not pass a trip the detector has already counted.
func (d *Detector) Late(trs []cbdash.TransitionRecord, stillDown func(service, instance, breaker string) bool) []Change {
	type inst struct {
		k        cbdash.DependencyKey
		instance string
	}
	type before struct {
		state string
		trip  cbdash.TransitionRecord
	}
	saved := make(map[inst]before)
	for _, tr := range trs {
		k := cbdash.DependencyKey{Service: tr.Service, Breaker: tr.Breaker}
		i := inst{k, tr.Instance}
		if _, ok := saved[i]; ok || !stillDown(tr.Service, tr.Instance, tr.Breaker) {
			continue
		}
		if s := d.deps[k]; s != nil {
			if st, known := s.states[tr.Instance]; known && down(st) {
				saved[i] = before{st, s.trips[tr.Instance]}
			}
		}
	}
	var out []Change
	for _, tr := range trs {
		out = append(out, d.observeTransition(tr)...)
	}
	for i, b := range saved {
		s := d.deps[i.k]
		if s == nil {
			continue
		}
		s.states[i.instance] = b.state
		if b.trip.To != "" {
			s.trips[i.instance] = b.trip
		}
		if s.inc != nil {
			s.closedSince = time.Time{}
		}
	}
	return out
}
