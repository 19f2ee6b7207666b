package live

import (
	"slices"
	"sort"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// recentSeconds is how far back Dependency.Recent looks.
const recentSeconds = 60

// recent sums the window reports of every instance of a dependency per
// second of their end time, over the last minute: a ring of one-second
// slots, so adding a report is O(1) whatever the number of instances.
type recent struct {
	slots [recentSeconds]slot
	since int64 // Unix second of the first report added, 0 = none
}

type slot struct {
	sec        int64 // Unix second this slot holds; 0 = empty
	counts     protocol.Counts
	latency    []int64
	latencySum float64
}

// add counts w in the slot of its end time plus late ms (an agent's clock
// behind the collector's), clamped to now (agent clocks may run ahead);
// reports that ended more than a minute ago are ignored.
func (r *recent) add(w *protocol.Window, late, now int64) {
	sec := min((w.Start+w.Millis+late)/1000, now)
	if sec <= now-recentSeconds || sec <= 0 {
		return
	}
	if r.since == 0 || sec < r.since {
		r.since = sec
	}
	s := &r.slots[sec%recentSeconds]
	if s.sec != sec {
		if s.sec > sec {
			return // the slot already holds a newer second
		}
		*s = slot{sec: sec, latency: s.latency[:0]}
	}
	s.counts.Add(w.Counts)
	if len(w.Latency) > 0 {
		if len(s.latency) == 0 {
			s.latency = append(s.latency, make([]int64, protocol.NumLatencyBuckets)...)
		}
		for i, n := range w.Latency {
			s.latency[i] = protocol.SatAdd(s.latency[i], n)
		}
	}
	s.latencySum += w.LatencySumMs
}

// sum returns the counts and merged histogram of the last minute, and the
// number of seconds they cover (at least 1).
func (r *recent) sum(now int64) (c protocol.Counts, hist []int64, span int64) {
	hist = make([]int64, protocol.NumLatencyBuckets)
	for i := range r.slots {
		s := &r.slots[i]
		if s.sec <= now-recentSeconds || s.sec > now {
			continue
		}
		c.Add(s.counts)
		for j, n := range s.latency {
			hist[j] = protocol.SatAdd(hist[j], n)
		}
	}
	span = recentSeconds
	if r.since > 0 && now-r.since+1 < span {
		span = now - r.since + 1
	}
	return c, hist, max(span, 1)
}

// quantile estimates the q-quantile of a histogram over
// protocol.LatencyBoundsMillis (protocol.QuantileMillis); 0 when empty.
func quantile(q float64, hist []int64) time.Duration {
	ms, ok := protocol.QuantileMillis(hist, q)
	if !ok {
		return 0
	}
	return millis(ms)
}

func millis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// compute builds d's aggregate at now. Stale instances are listed but do
// not count in State, ByState or Headroom.
func (l *State) compute(d *dep, now time.Time) *cbdash.Dependency {
	v := &cbdash.Dependency{
		DependencyKey: d.key,
		ByState:       make(map[string]int),
		OpensToday:    d.opensToday,
		LastChange:    d.lastChange,
		PerInstance:   make([]*cbdash.InstanceBreaker, 0, len(d.members)),
	}
	d.refreshLines()
	v.Labels = d.shape.labels
	v.PerInstance = append(v.PerInstance, d.lines...)
	best := d.countMembers(v)
	if !d.fallback.LastServed.IsZero() {
		fb := d.fallback
		v.Fallback = &fb
	}
	counts, hist, span := d.recent.sum(now.Unix())
	if d.recent.since == 0 {
		span = 0 // no call of its own here yet: the parts' spans say
	}
	// Other collectors' instances (summary.go): the rates are every
	// count over the longest span of them, as one collector's are its
	// counts over its ring's span; not each part's counts over its own
	// span, which counted an instance that moved twice for a minute: in
	// the old collector's minute before the move, and again in the new
	// one's few seconds since, extrapolated to a rate (a new user saw
	// 241/s for 197/s after a failback).
	span = max(span, d.addRemote(v, &counts, hist, &best), d.addFading(now, &counts, hist), 1)
	v.RequestRate = float64(protocol.SatAdd(counts.Admitted, counts.Rejected())) / float64(span)
	v.AdmittedRate = float64(counts.Admitted) / float64(span)
	v.RejectedRate = float64(counts.Rejected()) / float64(span)
	v.Recent = counts
	if recorded := counts.Successes + counts.Failures; recorded > 0 {
		v.FailureRate = 100 * float64(counts.Failures) / float64(recorded)
		v.SlowCallRate = 100 * float64(counts.Slow) / float64(recorded)
	}
	v.P50 = quantile(0.50, hist)
	v.P99 = quantile(0.99, hist)
	v.P50Millis, v.P99Millis = float64(v.P50)/float64(time.Millisecond), float64(v.P99)/float64(time.Millisecond)
	v.Closeness = cbdash.ClosenessOf(v.Headroom)
	v.Shown.Failure, v.Shown.Slow = cbdash.RatesOf(*v, nil)
	return v
}

// refreshLines brings d's lines and slots up to date: every line anew
// when its membership or a configuration changed, else the lines of the
// members changed since (dirty).
func (d *dep) refreshLines() {
	if d.sorted == nil {
		d.sorted = slices.Clone(d.members)
		sort.Slice(d.sorted, func(i, j int) bool { return d.sorted[i].inst.key.Instance < d.sorted[j].inst.key.Instance })
		d.shape = nil
	}
	if d.shape == nil || len(d.lines) != len(d.sorted) {
		// Membership or configurations changed: every line anew.
		d.shape = shapeOf(d.sorted)
		d.lines = make([]*cbdash.InstanceBreaker, len(d.sorted))
		d.slots = make([]memberSlot, len(d.sorted))
		for i, ib := range d.sorted {
			ib.slot = i
			d.refresh(ib)
		}
		for _, ib := range d.dirty {
			ib.computed()
		}
	} else {
		for _, ib := range d.dirty {
			ib.computed()
			if !ib.fresh && d.holds(ib) {
				d.refresh(ib)
			}
		}
	}
	d.dirty = d.dirty[:0]
}

// countMembers sets what v says of d's members from their slots: how
// many and how many stale, by state, the worst state, the earliest
// episode, the headroom of the one closest to opening and the hold that
// lasts longest. It returns that member's closeness score (-1: none).
func (d *dep) countMembers(v *cbdash.Dependency) float64 {
	var byState stateCounts
	bestCloseness := -1.0
	for i := range d.slots {
		m := &d.slots[i]
		v.Instances++
		if m.stale {
			v.Stale++
			continue
		}
		byState.addMember(m)
		if m.episode {
			if o := m.line.OpenSince; v.OpenSince.IsZero() || o.Before(v.OpenSince) {
				v.OpenSince = o
			}
		}
		if int(m.rank) < stateRank(v.State) {
			v.State = m.state()
		}
		if m.closeness > bestCloseness {
			bestCloseness, v.Headroom = m.closeness, m.last.Headroom
		}
		if m.held {
			if h := m.line.Held; v.Held == nil || outlasts(h, v.Held) {
				v.Held = h
			}
		}
	}
	byState.into(v.ByState)
	return bestCloseness
}

// memberSlot is what a dependency's aggregate and this collector's
// summary need of one member, as of its line (refresh): what every
// member counts in, and whether its line has more to read (an episode's
// start, a hold, a trip). 32 bytes, a member's share of live state's
// heap: its state is its rank's (state(), read from the line for a
// state of no rank).
type memberSlot struct {
	closeness float64                 // cbdash.ClosenessOf(line.Last.Headroom).Score
	line      *cbdash.InstanceBreaker // read-only
	last      *protocol.Window        // line.Last: what the summary sums (Summary.Last, Rate) without reading the line
	rank      int32                   // stateRank(line.State)
	stale     bool
	episode   bool // counts in OpenSince: not closed, and line.OpenSince is set
	held      bool // line.Held is set
	own       bool // served here (instance.own): counts in this collector's summary
}

// state is m's line's state.
func (m *memberSlot) state() string {
	if m.rank >= 0 && int(m.rank) < len(rankStates) {
		return rankStates[m.rank]
	}
	return m.line.State
}

// holds reports whether ib has its line in d.lines, where compute put
// it.
func (d *dep) holds(ib *ibreaker) bool {
	return ib.dep == d && ib.slot < len(d.sorted) && d.sorted[ib.slot] == ib
}

// refreshApplied rebuilds ib's line as a batch replaced its window (ib
// and its instance as the batch left them), so that the line lets go of
// the previous batch now rather than at the dependency's next compute:
// the whole array of a batch's windows lives while any line points into
// it, and lines rebuilt only at a compute would keep about half a
// publish interval's batches more alive (BenchmarkLiveHeapAt1000x20).
// A member's agent sends one window a publish interval, so the line is
// then built once an interval as before, only sooner. Not for a member
// sent several in an interval (a replayed backlog, HTTP ingest): its
// line is rebuilt by the compute, and so not on every batch; one that
// had several in the interval before (busy) waits for the compute from
// the first, so a replay costs one line more at its start, not one a
// batch. Nothing when every line is to be rebuilt anyway (membership or
// a configuration changed). A window not refreshed for marks ib's line
// out of date, also when an earlier window of the same batch refreshed
// it.
func (d *dep) refreshApplied(ib *ibreaker) {
	if ib.windows < 255 {
		ib.windows++
	}
	if ib.windows > 1 || ib.busy || d.shape == nil || len(d.lines) != len(d.sorted) || !d.holds(ib) {
		// A line built earlier in the interval (from the first window
		// of this batch, say: a quiet stretch before the tick with the
		// news) is out of date now: the compute rebuilds it.
		ib.fresh = false
		return
	}
	d.refresh(ib)
}

// computed ends ib's publish interval, for refreshApplied, as its
// dependency's compute visits it.
func (ib *ibreaker) computed() {
	ib.dirty, ib.busy, ib.windows = false, ib.windows > 1, 0
}

// refresh builds ib's line and slot anew.
func (d *dep) refresh(ib *ibreaker) {
	ib.fresh = true
	e := lineOf(d, ib)
	d.lines[ib.slot] = e
	d.slots[ib.slot] = memberSlot{closeness: cbdash.ClosenessOf(e.Last.Headroom).Score, line: e, last: e.Last,
		rank: int32(stateRank(e.State)), stale: e.Stale, episode: cbdash.NotClosed(e.State) && !e.OpenSince.IsZero(), held: e.Held != nil,
		own: ib.inst.own()}
}

// stateCounts counts live members by state without a map operation or
// a string comparison per member: the five states by rank (stateRank),
// any other by name.
type stateCounts struct {
	byRank [len(rankStates)]int
	extra  map[string]int
}

// rankStates are the states of ranks 0 to 4 (cbdash.StateRank).
var rankStates = [...]string{protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed, protocol.StateClosed}

// addMember counts member m in its state (its name read only for a
// state of no rank).
func (c *stateCounts) addMember(m *memberSlot) {
	if m.rank >= 0 && int(m.rank) < len(c.byRank) {
		c.byRank[m.rank]++
		return
	}
	c.add(m.rank, m.state())
}

// add counts a member in state, of rank stateRank(state).
func (c *stateCounts) add(rank int32, state string) {
	if rank >= 0 && int(rank) < len(c.byRank) {
		c.byRank[rank]++
		return
	}
	if c.extra == nil {
		c.extra = make(map[string]int)
	}
	c.extra[state]++
}

func (c *stateCounts) into(m map[string]int) {
	for r, n := range c.byRank {
		if n > 0 {
			m[rankStates[r]] += n
		}
	}
	for st, n := range c.extra {
		m[st] += n
	}
}

// lineOf builds ib's line of d's aggregate. It is a new line every time:
// the previous one may be held by views and subscribers, which share it
// read-only (cbdash.Dependency.PerInstance), so it is never changed. Its
// shown rates are figures without words (internal/wording says them
// where they are shown).
func lineOf(d *dep, ib *ibreaker) *cbdash.InstanceBreaker {
	inst := ib.inst
	e := &cbdash.InstanceBreaker{
		Service: d.key.Service, Instance: inst.key.Instance, Breaker: d.key.Breaker, Labels: inst.labels,
		State: ib.state, Stale: inst.stale, LastSeen: inst.lastSeen, LastTransition: ib.lastTransition,
		OpenSince: ib.openSince,
		Config:    ib.config, ConfigDiffers: d.shape.kinds > 1 && *ib.config != d.shape.majority,
		Last: ib.last, Held: ib.held, LastTrip: ib.lastTrip, LastTripReceivedAt: ib.lastTripAt,
		ClockSkewMillis: inst.skewMs,
	}
	e.Shown.Failure, e.Shown.Slow = cbdash.LineRatesOf(e, nil)
	return e
}

// shape is what changes only with a hello: configuration drift and the
// labels all instances share. It is cached per dependency: a member's
// labels and whether it is served here (instance.own) change only with
// a hello of its instance, which drops the shape of every dependency it
// declares (declareLocked), or with the dependency's membership, which
// drops it too (refreshLines).
type shape struct {
	majority protocol.BreakerConfig // the configuration most instances have
	kinds    int                    // distinct configurations
	labels   map[string]string      // shared by all instances; read-only
	// ownLabels are those shared by the instances served here
	// (instance.own), what this collector's summary says (Summary.Labels);
	// labels itself when every instance is. Read-only.
	ownLabels map[string]string
}

func shapeOf(sorted []*ibreaker) *shape {
	configs := make(map[protocol.BreakerConfig]int, 2)
	for _, ib := range sorted {
		configs[*ib.config]++ // by value: equal configurations of different hellos are one
	}
	sh := &shape{kinds: len(configs)}
	best, own := 0, 0
	for i, ib := range sorted {
		if c := *ib.config; configs[c] > best {
			sh.majority, best = c, configs[c]
		}
		sh.labels = sharedLabels(sh.labels, ib.inst.labels, i == 0)
		if ib.inst.own() {
			own++
		}
	}
	sh.ownLabels = sh.labels
	if own < len(sorted) {
		sh.ownLabels = ownLabelsOf(sorted)
	}
	return sh
}

// ownLabelsOf returns the labels shared by the members of sorted served
// here (instance.own); nil when none is.
func ownLabelsOf(sorted []*ibreaker) map[string]string {
	var labels map[string]string
	first := true
	for _, ib := range sorted {
		if ib.inst.own() {
			labels = sharedLabels(labels, ib.inst.labels, first)
			first = false
		}
	}
	return labels
}

// outlasts reports whether hold a ends after b (no expiry is the latest).
func outlasts(a, b *cbdash.Hold) bool {
	switch {
	case b.Until.IsZero():
		return false
	case a.Until.IsZero():
		return true
	}
	return a.Until.After(b.Until)
}

// sharedLabels narrows acc to the labels also in m with the same value;
// first starts from m. It never modifies its arguments.
func sharedLabels(acc, m map[string]string, first bool) map[string]string {
	if first {
		if len(m) == 0 {
			return nil
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	for k, v := range acc {
		if mv, ok := m[k]; !ok || mv != v {
			delete(acc, k)
		}
	}
	if len(acc) == 0 {
		return nil
	}
	return acc
}
