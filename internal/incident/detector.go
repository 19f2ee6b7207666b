package incident

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ErrInvalidConfig is wrapped by every error of Config validation.
var ErrInvalidConfig = errors.New("invalid incident config")

// DefaultQuiet is the quiet period used when Config.Quiet is 0.
const DefaultQuiet = 2 * time.Minute

// Config says when incidents open and close. Its zero value works: any
// instance opening starts an incident, which closes after two quiet
// minutes.
type Config struct {
	// Share is the percent (0..100) of a dependency's live instances that
	// must be open, half-open or forced open at once for an incident to
	// open. 0 means one instance is enough.
	Share float64
	// Quiet is how long every instance must stay closed before an
	// incident closes; an opening within it extends the incident. 0 means
	// DefaultQuiet.
	Quiet time.Duration
	// IncludeForced makes a forced_open command (a drill) start an
	// incident too. By default forced states only extend an incident that
	// a real trip opened.
	IncludeForced bool
}

func (c Config) validate() error {
	if math.IsNaN(c.Share) || c.Share < 0 || c.Share > 100 {
		return fmt.Errorf("%w: Share must be within 0..100 (got %v)", ErrInvalidConfig, c.Share)
	}
	if c.Quiet < 0 {
		return fmt.Errorf("%w: Quiet is negative", ErrInvalidConfig)
	}
	return nil
}

func (c Config) quiet() time.Duration {
	if c.Quiet == 0 {
		return DefaultQuiet
	}
	return c.Quiet
}

// ChangeKind says what happened to an incident.
type ChangeKind int

// Kinds of Change.
const (
	Opened  ChangeKind = iota + 1 // a new incident; its ID is 0 until SetID
	Updated                       // instances, opens or end changed
	Closed                        // the quiet period passed; End is set
)

// String returns "opened", "updated" or "closed".
func (k ChangeKind) String() string {
	switch k {
	case Opened:
		return "opened"
	case Updated:
		return "updated"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one thing the Detector decided, with a copy of the incident
// after it.
type Change struct {
	Kind     ChangeKind
	Incident cbdash.Incident
}

// Detector is the incident state machine of every dependency. It does no
// I/O and reads no clock: times come from the events and from Tick. It is
// not safe for concurrent use; Service owns one from one goroutine.
type Detector struct {
	cfg  Config
	deps map[cbdash.DependencyKey]*depState
}

type depState struct {
	// states holds the last state of every live instance we know of.
	states map[string]string
	// trips holds, per instance that is down now, the transition that took
	// it down (the start of its current episode).
	trips map[string]cbdash.TransitionRecord
	// tripped is, per live instance, the time (agent Unix ms) of the last
	// trip (transition to open) seen: Resync tells a trip missed while the
	// feed dropped us from one already counted.
	tripped map[string]int64
	live    int // live instances from the last dependency event, 0 = unknown
	// prev is what was learned from each line of the last dependency
	// event, in its order: a line at the same place of the same
	// instance, as stale and as tripped as then, has nothing new to teach
	// (states and tripped only take an instance's first value) and is
	// passed over without reading the maps. Not the lines themselves:
	// they would keep the last event's lines, and the batches of windows
	// their Last points into, alive until the next event.
	prev []seenLine
	inc  *cbdash.Incident
	// instShared: a snapshot shares inc.Instances' array, so addInstance
	// copies it before inserting (snapshot).
	instShared bool
	// closedSince is when every instance became closed during an open
	// incident; zero while one is down.
	closedSince time.Time
	// lastUp is the latest time an instance closed during the open
	// incident: transitions of different instances may arrive out of
	// order, and the quiet period starts at the last close, not at the
	// last one to arrive.
	lastUp time.Time
}

// NewDetector returns a Detector, or an error wrapping ErrInvalidConfig.
func NewDetector(cfg Config) (*Detector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Detector{cfg: cfg, deps: make(map[cbdash.DependencyKey]*depState)}, nil
}

func (d *Detector) dep(k cbdash.DependencyKey) *depState {
	s := d.deps[k]
	if s == nil {
		s = &depState{states: make(map[string]string), trips: make(map[string]cbdash.TransitionRecord), tripped: make(map[string]int64)}
		d.deps[k] = s
	}
	return s
}

// down reports whether an instance in state s counts against the
// dependency: open, half-open or forced open.
func down(s string) bool {
	return s == protocol.StateOpen || s == protocol.StateHalfOpen || s == protocol.StateForcedOpen
}

// Restore loads the live states of a collector snapshot and the incidents
// the store still holds open, at time now. Call it once, before Observe. An
// open incident whose instances are all closed starts its quiet period at
// now.
func (d *Detector) Restore(snapshot []cbdash.Dependency, open []cbdash.Incident, now time.Time) {
	for _, dep := range snapshot {
		d.observeDependency(dep, now)
	}
	for _, inc := range open {
		s := d.dep(inc.DependencyKey)
		c := inc
		c.Instances = slices.Clone(inc.Instances)
		s.inc = &c
		if !s.anyDown() {
			s.closedSince = now
		}
	}
}

// Resync takes the states of a fresh snapshot as truth (after the feed
// dropped us and events were missed) at time now: known instances take the
// snapshot's state, and an incident whose instances are all closed starts
// its quiet period at now. A trip missed meanwhile (an instance's last trip,
// InstanceBreaker.LastTrip, newer than the last one seen, or an instance
// down now that was not) counts as if it had been observed: it opens or
// joins the dependency's incident, at the trip's time, even when the
// instance has closed again since. It returns the changes, as Observe does;
// Tick closes incidents.
func (d *Detector) Resync(snapshot []cbdash.Dependency, now time.Time) []Change {
	var out []Change
	for _, dep := range snapshot {
		s := d.dep(dep.DependencyKey)
		var missed []cbdash.TransitionRecord
		for _, ib := range dep.PerInstance {
			if ib.Stale {
				continue
			}
			if tr, ok := missedTrip(s, ib); ok {
				missed = append(missed, tr)
			}
			s.states[ib.Instance] = ib.State
			if !down(ib.State) {
				delete(s.trips, ib.Instance)
			}
		}
		s.live = dep.Instances
		slices.SortFunc(missed, func(a, b cbdash.TransitionRecord) int {
			if a.At != b.At {
				return cmp.Compare(a.At, b.At)
			}
			return strings.Compare(a.Instance, b.Instance)
		})
		for _, tr := range missed {
			cur := s.states[tr.Instance]
			out = append(out, d.observeTransition(tr)...)
			s.states[tr.Instance] = cur // the snapshot's state, later than the trip
			if !down(cur) {
				delete(s.trips, tr.Instance)
			}
		}
		out = append(out, d.observeDependency(dep, now)...)
	}
	return out
}

// missedTrip returns the trip of ib that the detector has not seen: its
// last trip when newer than the last one seen, else, when it is down now
// and was not, a transition into its state at the start of its episode.
func missedTrip(s *depState, ib *cbdash.InstanceBreaker) (cbdash.TransitionRecord, bool) {
	rec := cbdash.TransitionRecord{Service: ib.Service, Instance: ib.Instance}
	switch {
	case ib.LastTrip != nil && ib.LastTrip.At > s.tripped[ib.Instance]:
		rec.Transition = *ib.LastTrip
	case down(ib.State) && !down(s.states[ib.Instance]):
		at := ib.OpenSince
		if at.IsZero() {
			at = ib.LastTransition
		}
		rec.Transition = protocol.Transition{Breaker: ib.Breaker, From: protocol.StateClosed, To: ib.State, At: at.UnixMilli()}
	default:
		return rec, false
	}
	return rec, true
}

// SetID records the ID the store gave the open incident of k.
func (d *Detector) SetID(k cbdash.DependencyKey, id int64) {
	if s := d.deps[k]; s != nil && s.inc != nil {
		s.inc.ID = id
	}
}

// Open returns copies of the incidents open now, in no particular order.
func (d *Detector) Open() []cbdash.Incident {
	var out []cbdash.Incident
	for _, s := range d.deps {
		if s.inc != nil {
			out = append(out, s.snapshot())
		}
	}
	return out
}

// Observe feeds one live event and returns what changed.
func (d *Detector) Observe(ev cbdash.Event) []Change {
	switch {
	case ev.Kind == cbdash.EventTransition && ev.Transition != nil:
		return d.observeTransition(*ev.Transition)
	case ev.Kind == cbdash.EventDependency && ev.Dependency != nil:
		return d.observeDependency(*ev.Dependency, ev.At)
	}
	return nil
}

func (d *Detector) observeTransition(tr cbdash.TransitionRecord) []Change {
	k := cbdash.DependencyKey{Service: tr.Service, Breaker: tr.Breaker}
	s := d.dep(k)
	at := time.UnixMilli(tr.At).UTC()
	s.states[tr.Instance] = tr.To
	if tr.To == protocol.StateOpen && tr.At > s.tripped[tr.Instance] {
		s.tripped[tr.Instance] = tr.At
	}
	if !down(tr.To) {
		delete(s.trips, tr.Instance)
		if s.inc != nil && at.After(s.lastUp) {
			s.lastUp = at
		}
		return s.settle(at)
	}
	if old, ok := s.trips[tr.Instance]; !ok || (!d.starts(old) && d.starts(tr)) {
		// The first transition down starts the episode; a real trip
		// after a forced open (forced_open -> open) is its first trip.
		s.trips[tr.Instance] = tr
	}
	// The quiet period may have passed before the tick that would close
	// the incident: this opening then starts a new one.
	var out []Change
	if s.inc != nil && !s.closedSince.IsZero() && at.Sub(s.closedSince) >= d.cfg.quiet() {
		out = append(out, s.close())
	}
	if s.inc == nil {
		if !d.starts(tr) || !d.shareReached(s) {
			return out
		}
		s.inc = s.start(k, d.starts)
		s.closedSince, s.lastUp = time.Time{}, time.Time{}
		return append(out, Change{Kind: Opened, Incident: s.snapshot()})
	}
	s.closedSince = time.Time{}
	changed := s.addInstance(tr.Instance)
	if tr.To == protocol.StateOpen {
		s.inc.Opens++
		changed = true
		// Instances report in their own batches: an earlier trip may
		// arrive after a later one. The incident starts at the earliest.
		if at.Before(s.inc.Start) {
			s.inc.Start, s.inc.FirstInstance, s.inc.FirstCause = at, tr.Instance, tr.Cause
		}
	}
	if !changed {
		return nil
	}
	return []Change{{Kind: Updated, Incident: s.snapshot()}}
}

// starts reports whether tr can start an incident: a trip to open, or a
// forced open (a drill) when Config.IncludeForced is set.
func (d *Detector) starts(tr cbdash.TransitionRecord) bool {
	return tr.To == protocol.StateOpen || (d.cfg.IncludeForced && tr.To == protocol.StateForcedOpen)
}

// start builds the incident from the instances down now: it starts at the
// earliest of their trips that can start one (starts), so that a drill's
// forced open, which by default only extends an incident, is never its
// first trip; an instance down without such a trip (forced open, or
// half-open after a resync) joins it.
func (s *depState) start(k cbdash.DependencyKey, starts func(cbdash.TransitionRecord) bool) *cbdash.Incident {
	inc := &cbdash.Incident{DependencyKey: k, Open: true}
	var first *cbdash.TransitionRecord
	before := func(a, b cbdash.TransitionRecord) bool {
		if starts(a) != starts(b) {
			return starts(a)
		}
		return a.At < b.At || (a.At == b.At && a.Instance < b.Instance)
	}
	for inst, tr := range s.trips {
		inc.Instances = append(inc.Instances, inst)
		if tr.To == protocol.StateOpen {
			inc.Opens++
		}
		if first == nil || before(tr, *first) {
			t := tr
			first = &t
		}
	}
	slices.Sort(inc.Instances)
	inc.Start = time.UnixMilli(first.At).UTC()
	inc.FirstInstance = first.Instance
	inc.FirstCause = first.Cause
	return inc
}

func (s *depState) addInstance(inst string) bool {
	i, found := slices.BinarySearch(s.inc.Instances, inst)
	if found {
		return false
	}
	if s.instShared {
		// A snapshot holds the array: without room, Insert copies it.
		s.inc.Instances, s.instShared = slices.Clip(s.inc.Instances), false
	}
	s.inc.Instances = slices.Insert(s.inc.Instances, i, inst)
	return true
}

func (s *depState) anyDown() bool {
	for _, st := range s.states {
		if down(st) {
			return true
		}
	}
	return false
}

// settle starts the quiet period when the last instance is closed.
func (s *depState) settle(at time.Time) []Change {
	if s.inc == nil || !s.closedSince.IsZero() || s.anyDown() {
		return nil
	}
	s.closedSince = at
	if s.lastUp.After(at) {
		s.closedSince = s.lastUp
	}
	return nil
}

func (d *Detector) shareReached(s *depState) bool {
	if d.cfg.Share == 0 {
		return true
	}
	live := s.live
	if live < len(s.states) {
		live = len(s.states)
	}
	n := 0
	for _, st := range s.states {
		if down(st) {
			n++
		}
	}
	return float64(n)*100 >= d.cfg.Share*float64(live)
}

// seenLine is what observeDependency learned from a line (see depState.prev).
type seenLine struct {
	instance    string
	stale, trip bool // trip: the line had a LastTrip
}

// observeDependency takes the live instance count, forgets stale and gone
// instances, and learns the state of instances it has not seen a
// transition from. at is the event's time: when a stale instance was the
// last one down, the quiet period starts then. States of known instances come only from transitions,
// which carry the agent's time.
func (d *Detector) observeDependency(dep cbdash.Dependency, at time.Time) []Change {
	s := d.dep(dep.DependencyKey)
	s.live = dep.Instances
	lines := dep.PerInstance
	if len(s.prev) != len(lines) {
		s.prev = make([]seenLine, len(lines)) // nothing matches a zero entry: instance names are not empty
	}
	n := 0 // live instances in the view: every one has a state below
	for i, ib := range lines {
		seen := seenLine{instance: ib.Instance, stale: ib.Stale, trip: ib.LastTrip != nil}
		if s.prev[i] == seen {
			// Learned from at the last event; only this function forgets
			// instances, and it did not forget this one then.
			if !seen.stale {
				n++
			}
			continue
		}
		s.prev[i] = seen
		if ib.Stale {
			continue
		}
		n++
		if _, ok := s.states[ib.Instance]; !ok {
			s.states[ib.Instance] = ib.State
		}
		if _, ok := s.tripped[ib.Instance]; !ok && ib.LastTrip != nil {
			s.tripped[ib.Instance] = ib.LastTrip.At // seen in its state; Resync must not count it again
		}
	}
	if len(s.states) == n {
		return s.settle(at) // no state of an instance gone or stale: nothing to forget
	}
	s.forgetGone(dep)
	return s.settle(at)
}

// forgetGone forgets the states of dep's instances that are stale or
// gone: every one without a live line, unless the view counts instances
// it has no line of, those another collector serves (internal/live,
// issue 36), whose states come from their transitions only: then only
// those whose line says they are stale.
func (s *depState) forgetGone(dep cbdash.Dependency) {
	partial := dep.Instances > len(dep.PerInstance)
	present := make(map[string]bool, len(dep.PerInstance))
	stale := map[string]bool{}
	for _, ib := range dep.PerInstance {
		if ib.Stale {
			stale[ib.Instance] = true
		} else {
			present[ib.Instance] = true
		}
	}
	for inst := range s.states {
		if (!partial && !present[inst]) || (partial && stale[inst]) {
			delete(s.states, inst)
			delete(s.trips, inst)
			delete(s.tripped, inst)
		}
	}
}

// Tick closes the incidents whose quiet period has passed at now.
func (d *Detector) Tick(now time.Time) []Change {
	var out []Change
	q := d.cfg.quiet()
	for k, s := range d.deps {
		if s.inc == nil || s.closedSince.IsZero() || now.Sub(s.closedSince) < q {
			continue
		}
		out = append(out, s.close())
		if len(s.states) == 0 {
			delete(d.deps, k)
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return a.Incident.Start.Compare(b.Incident.Start) })
	return out
}

// close ends the open incident at the start of its quiet period.
func (s *depState) close() Change {
	s.inc.End = s.closedSince
	s.inc.Open = false
	c := Change{Kind: Closed, Incident: s.snapshot()}
	s.inc, s.instShared = nil, false
	s.closedSince = time.Time{}
	return c
}

// snapshot returns a copy of the open incident, for a Change or a reader;
// nothing it holds changes afterwards. Its Instances share the detector's
// array, cut at their length, and the next addInstance copies the array
// before inserting (instShared): an incident of thousands of instances is
// not copied on every transition that updates it (at 5,000 instances that
// was 9% of the collector's allocated bytes).
func (s *depState) snapshot() cbdash.Incident {
	i := *s.inc
	i.Instances = i.Instances[:len(i.Instances):len(i.Instances)]
	s.instShared = true
	i.Notes = slices.Clone(i.Notes)
	return i
}
