package live

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The live state of instances served by other collectors (issue 36).
//
// A collector keeps every line of the instances it serves (connected
// here, or reporting over HTTP ingest here) and, of the instances served
// elsewhere, one Summary per dependency and serving collector: how many
// instances, how many by state, the last minute's counts and latency
// histogram summed over them, the headroom of the one closest to opening,
// the longest hold, the earliest episode, and the sum of the members'
// last windows (what a hold's pre-flight and plan count of them, Parts).
// The dependency's view (compute) adds those to its own members': its
// totals, state and rates are the fleet's, its PerInstance lines are this
// collector's members only. Pages that list members served elsewhere,
// holds' plan and refusals and the alert rules about single instances
// read them from the store (the collector's Members and LinesElsewhere),
// not from live state.
//
// A serving collector sends its summaries about once a second (only
// those that changed, every one every few seconds) and each transition
// of its instances at once (RemoteTransitions): a transition moves one
// instance of that collector's summary from one state to another until
// the next summary says how things are. A summary not renewed within
// RemoteExpiry is dropped (its collector is gone: its instances
// reconnect elsewhere), and sooner those of a collector no longer
// listening on the bus (KeepSources). After a gap on the bus the summaries are set
// from the store's last states (ResyncSummaries) until the collectors'
// next full round of summaries.
//
// Dependencies Config.FullDetail names (those a quorum rule turns on: the
// advisor reads every member's line) keep the previous scheme: their
// members' hellos and batches are applied from every collector
// (RemoteHello, RemoteBatch) and they are never summarised.

// RemoteExpiry is how long a summary from another collector counts
// without being renewed: a collector sends each of its summaries at
// least every few seconds (internal/collector: summaryFullEvery).
const RemoteExpiry = 12 * time.Second

// StoreHold is how long, after a gap on the bus, the store's states
// stand for the other collectors' summaries (see ResyncSummaries).
const StoreHold = 6 * time.Second

// Summary is one collector's part of one dependency: what the
// dependency's view needs of the instances that collector serves.
type Summary struct {
	cbdash.DependencyKey
	Instances int            // members, stale ones included
	Stale     int            // members silent for Config.StaleAfter
	ByState   map[string]int // live members by state
	Recent    protocol.Counts
	Span      int64   // seconds Recent covers (at least 1)
	Latency   []int64 // merged histogram of Recent (protocol.LatencyBoundsMillis); nil when none
	// Headroom is the sliding window of the member closest to opening,
	// Closeness its score (cbdash.ClosenessOf), -1 when no member is live.
	Headroom   protocol.Headroom
	Closeness  float64
	OpenSince  time.Time
	LastChange time.Time
	Held       *cbdash.Hold
	Fallback   *cbdash.FallbackRun
	Labels     map[string]string // shared by every member; read-only (this collector's is its dependency's cached one)
	// Trip is the rate trip cause of a live tripped member (the first by
	// instance whose trip is known; nil when none): the dependency's
	// shown rates come from it when no line here has one
	// (cbdash.Dependency.TripElsewhere).
	Trip *protocol.Cause
	// Last is the sum of the live members' last window reports, Rate the
	// sum of their calls per second (admitted and rejected calls over
	// each report's period): what a hold's plan and pre-flight count of
	// members served elsewhere (Parts).
	Last protocol.Counts
	Rate float64
}

// remotePart is another collector's summary of a dependency as this one
// holds it.
type remotePart struct {
	s     Summary
	at    time.Time // when it was received (collector's clock)
	store bool      // set from the store after a gap (ResyncSummaries)
}

// storeSource names the parts ResyncSummaries sets.
const storeSource = "\x00store"

// InstancesHeld is how many instances live state holds a line of
// (connected here, served here over HTTP, restored from the store, and
// the instances of Config.FullDetail dependencies served elsewhere).
func (l *State) InstancesHeld() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.instances)
}

// Summaries returns this collector's summary of every dependency it
// serves members of that changed since the last call (every one when
// all is set), and an empty one (Instances 0) of a dependency whose last
// member here went since (forgotten here too, or not); never one of a Config.FullDetail dependency.
// Members restored from the store and never heard from since are not
// counted: they are another collector's, or gone.
func (l *State) Summaries(all bool) []Summary {
	var out []Summary
	l.PublishSummaries(all, func(s []Summary) { out = s })
	return out
}

// PublishSummaries hands emit what Summaries returns, with the State's
// lock held: a transition Config.Applied was told of before emit is
// counted in these summaries, one it is told of after it is not. emit
// must not block, call back into the State, or keep the slice.
func (l *State) PublishSummaries(all bool, emit func([]Summary)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	emit(l.summariesLocked(all))
}

// summariesLocked is Summaries with the lock held.
func (l *State) summariesLocked(all bool) []Summary {
	now := l.now()
	var out []Summary
	for _, k := range l.unsent {
		if d := l.deps[k]; d != nil {
			d.summarized, d.unsummarized = true, true // known again: its summary says how many now
		} else {
			out = append(out, Summary{DependencyKey: k})
		}
	}
	clear(l.unsent)
	l.unsent = l.unsent[:0]
	due := l.due[:0]
	for _, d := range l.deps {
		if (l.full != nil && l.full(d.key)) || (!d.unsummarized && !(all && d.summarized)) {
			continue
		}
		due = append(due, d)
	}
	if len(due) > 0 && out == nil {
		out = make([]Summary, 0, len(due)) // once: a summary is 500 bytes
	}
	for _, d := range due {
		d.unsummarized = false
		s := l.summaryLocked(d, now)
		if s.Instances == 0 && !d.summarized {
			continue
		}
		d.summarized = s.Instances > 0
		out = append(out, s)
	}
	clear(due) // keeps no forgotten dependency
	l.due = due[:0]
	if len(out) == 0 {
		return nil
	}
	return out
}

// summaryLocked is d's summary of the members served here.
func (l *State) summaryLocked(d *dep, now time.Time) Summary {
	d.refreshLines()
	s := Summary{DependencyKey: d.key, ByState: map[string]int{}, LastChange: d.lastChange, Closeness: -1}
	var byState stateCounts
	for i := range d.slots {
		if m := &d.slots[i]; m.own {
			s.addMember(m, &byState)
		}
	}
	byState.into(s.ByState)
	if s.Instances == 0 {
		return Summary{DependencyKey: d.key}
	}
	s.Labels = d.shape.ownLabels
	counts, hist, span := d.recent.sum(now.Unix())
	s.Recent, s.Span = counts, span
	for _, n := range hist {
		if n != 0 {
			s.Latency = hist
			break
		}
	}
	if !d.fallback.LastServed.IsZero() {
		fb := d.fallback
		s.Fallback = &fb
	}
	return s
}

// addMember counts member m (served here) in s, its state in byState.
func (s *Summary) addMember(m *memberSlot, byState *stateCounts) {
	s.Instances++
	if m.stale {
		s.Stale++
		return
	}
	byState.addMember(m)
	if m.episode && (s.OpenSince.IsZero() || m.line.OpenSince.Before(s.OpenSince)) {
		s.OpenSince = m.line.OpenSince
	}
	if m.closeness > s.Closeness {
		s.Closeness, s.Headroom = m.closeness, m.last.Headroom
	}
	if m.held && (s.Held == nil || outlasts(m.line.Held, s.Held)) {
		s.Held = m.line.Held
	}
	if s.Trip == nil && cbdash.Tripped(m.state()) { // the line read only then
		if t := m.line.LastTrip; t != nil && cbdash.RateTrip(t.Cause) {
			c := t.Cause
			s.Trip = &c
		}
	}
	w := m.last // never nil (noWindow)
	s.Last.Add(w.Counts)
	if w.Millis > 0 {
		s.Rate += float64(w.Counts.Admitted+w.Counts.Rejected()) / (float64(w.Millis) / 1000)
	}
}

// Part is one other collector's summary of one dependency as this
// collector holds it (Parts).
type Part struct {
	From string // the collector's node id
	Summary
}

// Parts returns the summaries of other collectors this one holds (not
// those set from the store after a gap, ResyncSummaries), by dependency
// and then collector: what the instances served elsewhere add to a
// dependency. The summaries are shared: read them only.
func (l *State) Parts() []Part {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Part
	for _, d := range l.deps {
		for from, p := range d.remote {
			if !p.store {
				out = append(out, Part{From: from, Summary: p.s})
			}
		}
	}
	slices.SortFunc(out, func(a, b Part) int {
		if c := cmp.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Breaker, b.Breaker); c != 0 {
			return c
		}
		return cmp.Compare(a.From, b.From)
	})
	return out
}

// ApplySummary sets collector from's summary s (received at the
// collector's now). A summary of no instance removes that collector's
// part. The dependency's members restored from the store and never
// heard from since are forgotten: the summaries stand for them.
func (l *State) ApplySummary(from string, s Summary) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full != nil && l.full(s.DependencyKey) {
		return
	}
	d := l.deps[s.DependencyKey]
	if s.Instances == 0 {
		if p := d.remotePart(from); p != nil {
			delete(d.remote, from)
			d.fade(from, p, l.now()) // its last members went: their calls did not
			l.remoteChangedLocked(d)
		}
		return
	}
	if d == nil {
		d = l.depLocked(s.DependencyKey)
	}
	if d.remote == nil {
		d.remote = make(map[string]*remotePart, 1)
	}
	d.remote[from] = &remotePart{s: s, at: l.now()}
	delete(d.fading, from) // its new part counts its whole minute
	if s.LastChange.After(d.lastChange) {
		d.lastChange = s.LastChange
	}
	l.dropGhostsLocked(d)
	l.remoteChangedLocked(d)
}

// remoteChangedLocked marks d's view out of date after a change of its
// remote parts (not its own summary: nothing of its members changed).
// A dependency left with neither members nor parts is forgotten.
func (l *State) remoteChangedLocked(d *dep) {
	d.view = nil
	d.unpublished = true
	if len(d.members) == 0 && len(d.remote) == 0 {
		l.forgetDepLocked(d)
	}
}

// dropGhostsLocked forgets d's members restored from the store that no
// one has heard from since (no hello here): another collector serves
// them, or no one does.
func (l *State) dropGhostsLocked(d *dep) {
	for i := len(d.members) - 1; i >= 0; i-- {
		if ib := d.members[i]; !ib.inst.own() {
			l.dropBreakerLocked(ib)
			if len(ib.inst.breakers) == 0 && l.instances[ib.inst.key] == ib.inst {
				delete(l.instances, ib.inst.key)
			}
		}
	}
}

// own reports whether inst is served here: it said hello here (or is a
// Config.FullDetail instance of another collector's, which is never
// summarised).
func (inst *instance) own() bool { return inst.hello != nil || inst.sess != nil || inst.pull }

// RemoteTransitions publishes the transitions ts of instance k, served
// by collector from, received there at at, and moves that instance in
// from's summary of each dependency from the transition's state to its
// new one, until from's next summary.
func (l *State) RemoteTransitions(from string, k Key, ts []protocol.Transition, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inst := l.instances[k]; inst != nil && (inst.sess != nil || inst.pull) {
		return // served here: its own reports count
	}
	l.rollDayLocked(at)
	for i := range ts {
		t := &ts[i]
		dk := cbdash.DependencyKey{Service: k.Service, Breaker: t.Breaker}
		if l.full != nil && l.full(dk) {
			continue
		}
		d := l.depLocked(dk)
		p := l.movedPartLocked(d, from)
		p.s.move(t.From, t.To, time.UnixMilli(t.At).UTC())
		p.s.tripped(t)
		ts := time.UnixMilli(t.At).UTC()
		if ts.After(d.lastChange) {
			d.lastChange = ts
		}
		if t.From == protocol.StateClosed && t.To == protocol.StateOpen {
			d.opensToday++
		}
		rec := &cbdash.TransitionRecord{Service: k.Service, Instance: k.Instance, Transition: *t, ReceivedAt: at}
		l.hub.publish(cbdash.Event{Kind: cbdash.EventTransition, At: at, Transition: rec})
		l.remoteChangedLocked(d)
		l.urgent[d] = struct{}{}
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// movedPartLocked returns the part a remote transition of d by
// collector from moves: the store's while it stands (after a gap), else
// from's, made when it has none yet (its summary is on its way).
func (l *State) movedPartLocked(d *dep, from string) *remotePart {
	if p := d.remote[storeSource]; p != nil {
		return p
	}
	if p := d.remote[from]; p != nil {
		return p
	}
	if d.remote == nil {
		d.remote = make(map[string]*remotePart, 1)
	}
	p := &remotePart{s: Summary{DependencyKey: d.key, ByState: map[string]int{}, Closeness: -1}, at: l.now()}
	d.remote[from] = p
	return p
}

// move moves one instance of s from state from to state to at t; one
// s did not count (new since its summary) is added.
func (s *Summary) move(from, to string, t time.Time) {
	if s.ByState == nil {
		s.ByState = map[string]int{}
	}
	if s.ByState[from] > 0 {
		if s.ByState[from]--; s.ByState[from] == 0 {
			delete(s.ByState, from)
		}
	} else {
		s.Instances++
	}
	s.ByState[to]++
	if cbdash.NotClosed(to) && s.OpenSince.IsZero() {
		s.OpenSince = t
	}
}

// tripped keeps s.Trip as transition t leaves it: t's cause when it is a
// rate trip, none once no instance of s is tripped.
func (s *Summary) tripped(t *protocol.Transition) {
	switch {
	case t.To == protocol.StateOpen && cbdash.RateTrip(t.Cause):
		c := t.Cause
		s.Trip = &c
	case s.ByState[protocol.StateOpen]+s.ByState[protocol.StateHalfOpen] == 0:
		s.Trip = nil
	}
}

// ResyncSummaries sets, after a gap on the bus, the other collectors'
// parts of every dependency from the store's last states ibs of the
// instances not served here: for StoreHold they stand for the summaries
// (a summary that arrives meanwhile is kept for after), then the
// collectors' summaries, renewed meanwhile, count again. Lines of
// Config.FullDetail dependencies are left to Resync.
func (l *State) ResyncSummaries(ibs []cbdash.InstanceBreaker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	parts := map[cbdash.DependencyKey]*remotePart{}
	for _, r := range ibs {
		dk := cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker}
		if l.full != nil && l.full(dk) {
			continue
		}
		if inst := l.instances[Key{r.Service, r.Instance}]; inst != nil && inst.own() {
			continue
		}
		p := parts[dk]
		if p == nil {
			p = &remotePart{s: Summary{DependencyKey: dk, ByState: map[string]int{}, Closeness: -1}, at: now, store: true}
			parts[dk] = p
		}
		p.s.Instances++
		if now.Sub(r.LastSeen) > l.staleAfter {
			p.s.Stale++
		} else if r.State != "" {
			p.s.ByState[r.State]++
		} else {
			p.s.ByState[protocol.StateClosed]++
		}
		if r.LastTransition.After(p.s.LastChange) {
			p.s.LastChange = r.LastTransition
		}
	}
	for _, d := range l.deps {
		if d.remote[storeSource] != nil {
			delete(d.remote, storeSource)
			l.remoteChangedLocked(d)
		}
	}
	for dk, p := range parts {
		d := l.depLocked(dk)
		if d.remote == nil {
			d.remote = make(map[string]*remotePart, 1)
		}
		d.remote[storeSource] = p
		l.remoteChangedLocked(d)
		l.urgent[d] = struct{}{}
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// expireRemoteLocked drops the parts not renewed within RemoteExpiry and
// the store's after StoreHold, and returns the dependencies that changed.
func (l *State) expireRemoteLocked(now time.Time, changed []*dep) []*dep {
	n0 := len(changed)
	for _, d := range l.deps {
		n := len(d.remote)
		for from, p := range d.remote {
			if (p.store && now.Sub(p.at) > StoreHold) || (!p.store && now.Sub(p.at) > RemoteExpiry) {
				delete(d.remote, from)
				d.fade(from, p, now)
			}
		}
		fading := d.sweepFading(now)
		if len(d.remote) != n || fading {
			changed = append(changed, d)
			l.remoteChangedLocked(d)
		}
	}
	if len(changed) > n0 {
		l.pruneClaimsLocked(nil)
	}
	return changed
}

// remotePart is d's part of collector from; nil when d is nil or has
// none.
func (d *dep) remotePart(from string) *remotePart {
	if d == nil {
		return nil
	}
	return d.remote[from]
}

// fade keeps part p of collector from, just dropped, among d's fading
// parts while its last minute has not slid out at now (a store's part
// has no counts of its own: it is not kept).
func (d *dep) fade(from string, p *remotePart, now time.Time) {
	if p.store || now.Sub(p.at) >= recentSeconds*time.Second {
		return
	}
	if d.fading == nil {
		d.fading = make(map[string]*remotePart)
	}
	d.fading[from] = p
}

// sweepFading forgets the fading parts whose minute has slid out at now,
// and reports whether d has fading parts left or forgot some (its view
// changes with time).
func (d *dep) sweepFading(now time.Time) bool {
	if len(d.fading) == 0 {
		return false
	}
	for from, p := range d.fading {
		if now.Sub(p.at) >= recentSeconds*time.Second {
			delete(d.fading, from)
		}
	}
	return true
}

// partSpan is the span of p's counts (Summary.Span, seconds).
func partSpan(p *remotePart) time.Duration { return time.Duration(max(p.s.Span, 1)) * time.Second }

// addFading adds to counts and hist what d's fading parts still count
// at now: each part's counts (spread over its span before it was sent)
// scaled by the share of them still within the last minute
// ((60 s - age) / span, at most 1: steady traffic leaves the window at
// that pace), so
// that the calls of a collector that died do not vanish from the
// dependency's one-minute rates at once, while its instances, reconnected
// here, count from their first report. It returns the longest span of
// those parts (seconds, 0 without any).
func (d *dep) addFading(now time.Time, counts *protocol.Counts, hist []int64) (span int64) {
	for _, p := range d.fading {
		ps := partSpan(p)
		f := min(1, float64(recentSeconds*time.Second-now.Sub(p.at))/float64(ps))
		if f <= 0 {
			continue
		}
		s := &p.s
		counts.Add(scaleCounts(s.Recent, f))
		for i, n := range s.Latency {
			if i < len(hist) {
				hist[i] = protocol.SatAdd(hist[i], int64(math.Round(float64(n)*f)))
			}
		}
		span = max(span, int64(ps/time.Second))
	}
	return span
}

// scaleCounts is c with every count times f, rounded.
func scaleCounts(c protocol.Counts, f float64) protocol.Counts {
	r := func(v int64) int64 { return int64(math.Round(float64(v) * f)) }
	return protocol.Counts{Admitted: r(c.Admitted), Successes: r(c.Successes), Failures: r(c.Failures), Errors: r(c.Errors),
		Timeouts: r(c.Timeouts), Panics: r(c.Panics), Slow: r(c.Slow), Ignored: r(c.Ignored), RejectedOpen: r(c.RejectedOpen),
		RejectedHalfOpen: r(c.RejectedHalfOpen), RejectedForced: r(c.RejectedForced), RejectedBulkhead: r(c.RejectedBulkhead),
		FallbackSuccess: r(c.FallbackSuccess), FallbackFailure: r(c.FallbackFailure), Misuse: r(c.Misuse), RejectedRamp: r(c.RejectedRamp)}
}

// activeParts returns the parts of d that count now: the store's while
// it stands, else the collectors'.
func (d *dep) activeParts() []*remotePart {
	if len(d.remote) == 0 {
		return nil
	}
	if p := d.remote[storeSource]; p != nil {
		return []*remotePart{p}
	}
	out := make([]*remotePart, 0, len(d.remote))
	for _, p := range d.remote {
		out = append(out, p)
	}
	return out
}

// addRemote adds d's active remote parts to v (its own members counted),
// their counts to counts and their histograms to hist, and returns the
// longest span of their counts (seconds, 0 without parts).
func (d *dep) addRemote(v *cbdash.Dependency, counts *protocol.Counts, hist []int64, best *float64) (span int64) {
	for _, p := range d.activeParts() {
		s := &p.s
		s.addTo(v, best)
		counts.Add(s.Recent)
		for i, n := range s.Latency {
			if i < len(hist) {
				hist[i] = protocol.SatAdd(hist[i], n)
			}
		}
		span = max(span, s.Span)
	}
	return span
}

// addTo adds what s says of its instances to v: counts, states, labels,
// the earliest episode, the headroom closest to opening (best: the
// closeness of v's so far), the longest hold and the latest fallback.
func (s *Summary) addTo(v *cbdash.Dependency, best *float64) {
	v.Labels = sharedLabels(maps.Clone(v.Labels), s.Labels, v.Instances == 0) // v's may be the shape's
	v.Instances += s.Instances
	v.Stale += s.Stale
	addStates(v, s.ByState)
	if !s.OpenSince.IsZero() && (v.OpenSince.IsZero() || s.OpenSince.Before(v.OpenSince)) {
		v.OpenSince = s.OpenSince
	}
	if s.Closeness > *best {
		*best, v.Headroom = s.Closeness, s.Headroom
	}
	if s.Held != nil && (v.Held == nil || outlasts(s.Held, v.Held)) {
		v.Held = s.Held
	}
	if s.Trip != nil && v.TripElsewhere == nil {
		v.TripElsewhere = s.Trip
	}
	if s.Fallback != nil && (v.Fallback == nil || s.Fallback.LastServed.After(v.Fallback.LastServed)) {
		fb := *s.Fallback
		v.Fallback = &fb
	}
}

// addStates adds the instances by state of byState to v's, and makes
// v's state the worst of them.
func addStates(v *cbdash.Dependency, byState map[string]int) {
	for st, n := range byState {
		if n > 0 {
			v.ByState[st] += n
			if stateRank(st) < stateRank(v.State) {
				v.State = st
			}
		}
	}
}

// RemoteClaim says instance k said hello to collector from: held here
// without a websocket session (it was served here before, or restored
// from the store), it is forgotten, as that collector's summaries count
// it now (one served here is added to from's summaries until the next
// one, which counts it: moved.go); held with one (its new session there came first), it is
// forgotten when that session ends (Disconnect). from is remembered as
// the collector whose summaries count k until its next hello here
// (moved.go). Of a Config.FullDetail dependency its lines come back with
// that collector's RemoteHello.
func (l *State) RemoteClaim(from string, k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claimedBy[k] = from
	if inst := l.instances[k]; inst != nil && inst.sess == nil {
		l.handOverLocked(inst, from)
	}
	l.forgetLocked(k)
}

// SeedClaims records, of each instance in claims not served here and of
// no claim heard on the bus yet, the collector that claimed it (its
// value): what a collector that starts, or missed messages, reads of the
// claims made before, so that an instance that then moves here is taken
// out of that collector's summary (moved.go) as if its claim had been
// heard.
func (l *State) SeedClaims(claims map[Key]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, from := range claims {
		if inst := l.instances[k]; inst != nil && (inst.sess != nil || inst.pull) {
			continue
		}
		if _, heard := l.claimedBy[k]; !heard {
			l.claimedBy[k] = from
		}
	}
}

// KeepSources drops the parts of the collectors not in alive (those
// listening on the bus) received more than grace ago: a collector that
// died (kill -9) has its instances reconnect elsewhere within a second,
// and its last summaries would count them twice until RemoteExpiry.
// grace spares a collector whose listening connection is being
// re-established while it still publishes.
func (l *State) KeepSources(alive []string, grace time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	keep := make(map[string]bool, len(alive)+1)
	keep[storeSource] = true
	for _, id := range alive {
		keep[id] = true
	}
	dropped := false
	for _, d := range l.deps {
		n := len(d.remote)
		for from, p := range d.remote {
			if !keep[from] && now.Sub(p.at) > grace {
				delete(d.remote, from)
				d.fade(from, p, now)
			}
		}
		if len(d.remote) != n {
			l.urgent[d] = struct{}{}
			l.remoteChangedLocked(d)
			dropped = true
		}
	}
	if dropped {
		l.pruneClaimsLocked(keep)
	}
}

// Seed sets the state of the breakers of instances served here that have
// reported nothing since their hello to their last state in the store,
// ibs: an instance that moved here from another collector (which counted
// it in its summaries) is shown in the state it was in there, not closed
// (a declared breaker's state) until its first report. A breaker that
// reported since is left as it is. The state of an instance that moved
// here is taken out of the part of the collector it moved from that
// still counts it (moved.go).
func (l *State) Seed(ibs []cbdash.InstanceBreaker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ibs {
		inst := l.instances[Key{r.Service, r.Instance}]
		if inst == nil {
			continue
		}
		l.seedMovedLocked(inst, &r)
		if r.State == "" {
			continue
		}
		ib := inst.breakers[r.Breaker]
		if ib == nil || ib.stateAt != 0 || !ib.lastTransition.IsZero() || ib.state == r.State {
			continue
		}
		ib.state, ib.lastTransition = r.State, r.LastTransition
		if cbdash.NotClosed(r.State) {
			ib.openSince = r.LastTransition
		}
		l.bump(inst)
		l.changedLocked(ib.dep)
		l.urgent[ib.dep] = struct{}{}
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}
