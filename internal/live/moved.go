package live

import (
	"maps"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// An instance that moves here from another collector (its session there
// ended, or that collector died) is counted here by its own line from its
// hello on, and there by that collector's summaries until the next one
// (sent within a second, or never: a dead collector's summaries count
// until KeepSources or RemoteExpiry drops them). So that it is counted
// once meanwhile, its hello here takes it out of that collector's part
// of each of its dependencies: the instances at once (movedHereLocked),
// the state it was counted in when Seed reads it from the store
// (seedMovedLocked). The collector is the one that last claimed the
// instance on the bus (RemoteClaim). The adjustment is made to the part
// held now and goes with it: the collector's next summary replaces it,
// and it no longer counts the instance once that collector forgot it
// (at this collector's claim, or at the end of its session).

// movedHereLocked takes inst, which said hello here, out of the parts of
// the collector that claimed it last, if any: one instance less in each
// part of its dependencies, the part remembered until seedMovedLocked
// takes its state out too. A part reduced to no instance is dropped.
func (l *State) movedHereLocked(inst *instance) {
	from, ok := l.claimedBy[inst.key]
	if !ok {
		return
	}
	delete(l.claimedBy, inst.key)
	inst.moved = nil
	for name, ib := range inst.breakers {
		d := ib.dep
		p := d.remote[from]
		if p == nil || p.store || p.s.Instances <= 0 || (l.full != nil && l.full(d.key)) {
			continue
		}
		l.urgent[d] = struct{}{}
		l.remoteChangedLocked(d)
		if p.s.Instances == 1 {
			delete(d.remote, from)   // it stood for this instance only
			d.fade(from, p, l.now()) // its calls there did not go
			continue
		}
		q := *p // shared: Parts' callers may read the old one
		q.s.Instances--
		q.s.ByState = maps.Clone(p.s.ByState)
		d.remote[from] = &q
		if inst.moved == nil {
			inst.moved = make(map[string]*remotePart, len(inst.breakers))
		}
		inst.moved[name] = &q
	}
}

// seedMovedLocked takes the breaker r of an instance that moved here
// (movedHereLocked) out of the state it was counted in by the part it
// was taken out of, if that part still counts (no newer summary since):
// stale when the store last heard of it more than Config.StaleAfter ago,
// else its stored state (closed when none).
func (l *State) seedMovedLocked(inst *instance, r *cbdash.InstanceBreaker) {
	p := inst.moved[r.Breaker]
	if p == nil {
		return
	}
	delete(inst.moved, r.Breaker)
	ib := inst.breakers[r.Breaker]
	if ib == nil {
		return
	}
	d := ib.dep
	counts := false
	for _, q := range d.remote {
		counts = counts || q == p
	}
	if !counts {
		return
	}
	st := r.State
	if st == "" {
		st = protocol.StateClosed
	}
	switch {
	case l.now().Sub(r.LastSeen) <= l.staleAfter && p.s.ByState[st] > 0:
		p.s.ByState = maps.Clone(p.s.ByState) // Parts' callers may read the old one
		if p.s.ByState[st]--; p.s.ByState[st] == 0 {
			delete(p.s.ByState, st)
		}
	case p.s.Stale > 0:
		p.s.Stale--
	default:
		return
	}
	l.urgent[d] = struct{}{}
	l.remoteChangedLocked(d)
}

// pruneClaimsLocked forgets who claimed the instances of the collectors
// neither in keep nor holding a part of any dependency any more (after
// their parts were dropped: they are gone).
func (l *State) pruneClaimsLocked(keep map[string]bool) {
	holding := map[string]bool{}
	for _, d := range l.deps {
		for from := range d.remote {
			holding[from] = true
		}
	}
	for k, from := range l.claimedBy {
		if !keep[from] && !holding[from] {
			delete(l.claimedBy, k)
		}
	}
}

// handOverLocked adds inst, served here until now (held without a
// session: its last session ended) and just claimed by collector from,
// to from's part of each of its dependencies, in the state its line
// shows here (stale when it is), until from's next summary: the claim
// left from after its hello of inst, so its summaries sent after the
// claim count inst, those before did not. Without it inst, forgotten
// here at the claim, would be counted nowhere until then.
func (l *State) handOverLocked(inst *instance, from string) {
	if inst.hello == nil && !inst.pull {
		return // a line restored from the store: counted here by no summary
	}
	for _, ib := range inst.breakers {
		d := ib.dep
		if l.full != nil && l.full(d.key) {
			continue
		}
		p := l.movedPartLocked(d, from)
		s := p.s // shared: Parts' callers may read the old one
		s.Instances++
		s.ByState = maps.Clone(s.ByState)
		if s.ByState == nil {
			s.ByState = map[string]int{}
		}
		switch {
		case inst.stale:
			s.Stale++
		case ib.state == "":
			s.ByState[protocol.StateClosed]++
		default:
			s.ByState[ib.state]++
		}
		p.s = s
		l.urgent[d] = struct{}{}
		l.remoteChangedLocked(d)
	}
}
