package source

import (
	"math"
	"slices"
	"time"
)

// The rolling counts of a HystrixCommand record that cbdash reads, by
// their index in rollingCounts.read's values. The last two are read to
// tell hystrix-go's windows apart (oldestKept), not reported.
const (
	rollSuccess            = iota // rollingCountSuccess
	rollFailure                   // rollingCountFailure
	rollTimeout                   // rollingCountTimeout
	rollShortCircuited            // rollingCountShortCircuited
	rollSemaphoreRejected         // rollingCountSemaphoreRejected
	rollThreadPoolRejected        // rollingCountThreadPoolRejected
	rollBadRequest                // rollingCountBadRequests
	rollFallbackSuccess           // rollingCountFallbackSuccess
	rollFallbackFailure           // rollingCountFallbackFailure
	rollRequests                  // requestCount: every call
	rollErrors                    // errorCount: failures, timeouts, short-circuited and rejected calls
	nRolled
)

// rollingLayout is how a writer's rolling counts cover time: which events
// one read sums. A Hystrix stream reports, for each count, the events of
// the last rolling window, kept in buckets (10 of 1 s by default) that
// slide: the events of a bucket leave the count together, when the bucket
// falls out of the window.
type rollingLayout struct {
	// perRecord is set when a bucket closes just before each record and
	// a read sums the closed buckets: opossum-hystrix, whose record is
	// opossum's snapshot, taken on the same 1 s timer as the rotation of
	// its buckets and just after it (opossum lib/status.js). Otherwise
	// the buckets follow the writer's clock, bucket i covering
	// [i*bucket, (i+1)*bucket) of it, and a read sums the current bucket
	// up to the read with the buckets-1 before it: hystrix-go, whose
	// buckets are whole seconds of its clock (hystrix/rolling), and the
	// default for other writers.
	perRecord bool
	bucket    time.Duration // one bucket's length, > 0
	buckets   int           // in the window, the current one included; >= 2
	// keepsOldest is hystrix-go's rolling.Number: it sums the buckets at
	// most 10 s old by their second (11 of them) and deletes the oldest
	// only when the count gets an event. A read therefore also sums the
	// bucket buckets back as long as the count had no event yet in the
	// current second.
	keepsOldest bool
}

// span is how many buckets a read sums (the one kept by keepsOldest
// aside).
func (l rollingLayout) span() int64 {
	if l.perRecord {
		return int64(l.buckets - 1)
	}
	return int64(l.buckets)
}

// rollingHints is what a record says of a read besides its counts.
type rollingHints struct {
	// cleared: the writer cleared every count since the previous read
	// (hystrix-go does when its circuit closes: metrics.Reset).
	cleared bool
	// share[i]: the share of count i's events in the window that left it
	// at once since the previous read, without ageing out (the hosts of a
	// Turbine stream that cleared theirs: see hystrixBreaker.read).
	share [nRolled]float64
	// cluster: the counts are a cluster's sums (Turbine): its hosts'
	// buckets leave at their own reads, so a read's excess of new events
	// is not taken as events that came late (late).
	cluster bool
}

// rollingCounts recovers, from the successive reads of a breaker's
// rolling counts, the events new at each read: the counts a window
// report carries.
//
// It keeps an estimate of each bucket still in the window, made of the
// new events it attributed to it. At a read, the events new since the
// previous one are the count less the estimates of the buckets still in
// the window: the bucket that left is known from its own earlier
// estimates. They are attributed to the buckets the time since the
// previous read covers (the read falls within a bucket, the events of
// the interval are not known one by one): in proportion to the time of
// each, made again at the next read from the rates on either side
// (refine), the outcomes following requestCount's shape. An event is
// reported once, when it enters the window, and not again when it
// leaves; what is estimated is which bucket it is in, and an error there
// comes back when the bucket leaves: as events that seem new (late holds
// them in the window once, when they are far more than the recent rate)
// or as fewer than came (a read that explains less than the estimates
// left in the window reports 0 and pays the excess back from the reads
// that follow: hystrix-go's first from the bucket that shared the
// leaving one's interval, tooMany). A count whose reads see the same
// calls each second is taken as steady (steady): which second steady
// calls came in is told by their count, not by time. A read whose window
// is empty empties the estimates.
//
// A count the writer cleared (hystrix-go when its circuit closes) loses
// the events between the previous read and the clearing: clearedRead
// estimates them from the rate of each count before it. The README
// states the error measured against hystrix-go and opossum-hystrix
// (rolling_test.go, internal/source/e2e, node_test.go).
type rollingCounts struct {
	layout  rollingLayout
	started bool
	cur     int64     // the bucket of the previous read (perRecord: its number)
	startHi int64     // the last bucket of the first read's window
	last    time.Time // the previous read, on the writer's clock
	// the previous read's new events per count, the time since the read
	// before it, and its requestCount
	lastNew      [nRolled]float64
	lastDur      time.Duration
	lastRequests float64
	c            [nRolled]bucketEstimates
	// guide is requestCount's last attribution, refined: the others'
	// follow its shape (refine).
	guide spanned
}

// bucketEstimates are one count's estimates of the buckets of the window.
type bucketEstimates struct {
	base int64     // the bucket of est[0]
	est  []float64 // estimates of buckets base, base+1...
	// held is the part of est that rollingCounts.late kept in the window
	// past the bucket it was attributed to: it may not be kept again.
	held []float64
	// owed are events computed but not reported yet: a fraction below 1,
	// or (negative) events reported too many, paid back first.
	owed float64
	// recent are the rates (events a second) of the last reads, the
	// newest at recent[(next-1) % len]: their median is the count's
	// recent rate, which a burst does not raise.
	recent [5]float64
	next   int
	// last is the previous read's attribution by time, made again at the
	// next read once the rate after it is known (refine).
	last spanned
}

// spanned is an attribution of n events over (from, to] (ns of the
// writer's clock) to buckets first..last, made uniform in time; before
// is the events a second of the read interval before it.
type spanned struct {
	n, before   float64
	after       float64 // of requestCount's, once refined (rollingCounts.guide)
	from, to    int64
	first, last int64
	ok          bool
}

func (b *bucketEstimates) get(i int64) float64 {
	if i < b.base || i >= b.base+int64(len(b.est)) {
		return 0
	}
	return b.est[i-b.base]
}

// add adds v to the estimate of bucket i, events held (see held) when
// held is set.
func (b *bucketEstimates) add(i int64, v float64, held bool) {
	if len(b.est) == 0 {
		b.base = i
	}
	if i < b.base {
		n := int(b.base - i)
		b.est = append(make([]float64, n), b.est...)
		b.held = append(make([]float64, n), b.held...)
		b.base = i
	}
	for i >= b.base+int64(len(b.est)) {
		b.est = append(b.est, 0)
		b.held = append(b.held, 0)
	}
	b.est[i-b.base] += v
	if held {
		b.held[i-b.base] += v
	}
}

// sum is the estimate of buckets lo..hi.
func (b *bucketEstimates) sum(lo, hi int64) float64 {
	var t float64
	for i := max(lo, b.base); i <= hi && i < b.base+int64(len(b.est)); i++ {
		t += b.est[i-b.base]
	}
	return t
}

// sumHeld is the held part of the estimate of buckets lo..hi.
func (b *bucketEstimates) sumHeld(lo, hi int64) float64 {
	var t float64
	for i := max(lo, b.base); i <= hi && i < b.base+int64(len(b.held)); i++ {
		t += b.held[i-b.base]
	}
	return t
}

// scale multiplies the estimates of buckets lo..hi by f.
func (b *bucketEstimates) scale(lo, hi int64, f float64) {
	for i := max(lo, b.base); i <= hi && i < b.base+int64(len(b.est)); i++ {
		b.est[i-b.base] *= f
		b.held[i-b.base] *= f
	}
}

// drop forgets the buckets before lo.
func (b *bucketEstimates) drop(lo int64) {
	if lo <= b.base {
		return
	}
	n := min(lo-b.base, int64(len(b.est)))
	b.est = append(b.est[:0], b.est[n:]...)
	b.held = append(b.held[:0], b.held[n:]...)
	b.base = lo
}

// observe takes a read's n new events over d.
func (b *bucketEstimates) observe(n float64, d time.Duration) {
	if d <= 0 {
		return
	}
	b.recent[b.next%len(b.recent)] = max(n, 0) / d.Seconds()
	b.next++
}

// rate is the count's recent rate: the median of its last reads' rates.
func (b *bucketEstimates) rate() float64 {
	s := b.recent
	n := min(b.next, len(s))
	if n == 0 {
		return 0
	}
	slices.Sort(s[:n])
	return s[n/2]
}

// report adds n computed new events and returns those to report now:
// whole events, none while events reported too many are paid back.
func (b *bucketEstimates) report(n float64) int64 {
	b.owed += n
	r := math.Floor(b.owed + 1e-9)
	if r < 1 {
		return 0
	}
	b.owed -= r
	return int64(min(r, float64(math.MaxInt64/2)))
}

func (r *rollingCounts) clone() rollingCounts {
	c := *r
	for i := range c.c {
		c.c[i].est = slices.Clone(r.c[i].est)
		c.c[i].held = slices.Clone(r.c[i].held)
	}
	return c
}

// read takes the counts a record read at at (on the writer's clock) shows
// and returns the events new since the previous read. The first read is a
// baseline (its counts are the window's events, not known to be new: it
// reports none), and so is a read after the writer's clock went back or
// the layout changed: they start the estimates over.
func (r *rollingCounts) read(at time.Time, l rollingLayout, vals [nRolled]int64, h rollingHints) (out [nRolled]int64) {
	defer func() { r.lastRequests = float64(vals[rollRequests]) }()
	k, ok := r.bucketOf(at, l)
	if !r.started || !ok || l != r.layout {
		r.start(at, l, vals)
		return out
	}
	dt := at.Sub(r.last)
	if h.cleared {
		return r.clearedRead(at, k, dt, vals)
	}
	lo := k - l.span() + 1
	var n, extra [nRolled]float64
	for i := range nRolled {
		b := &r.c[i]
		if s := h.share[i]; s > 0 {
			b.scale(b.base, r.cur, max(1-s, 0))
		}
		n[i] = float64(vals[i]) - b.sum(lo, r.cur)
		if vals[i] == 0 {
			// An empty window: what the estimates held past its bucket
			// (late) left with the rest, late but not too many.
			n[i] += b.sumHeld(lo, r.cur)
		}
		if l.keepsOldest && k > r.cur {
			extra[i] = b.get(lo - 1)
		}
	}
	var kept [nRolled]bool
	if l.keepsOldest && k > r.cur {
		kept = r.oldestKept(vals, n, extra, k, at)
	}
	// requestCount first: the outcomes' attributions follow its (refine).
	for j := range nRolled {
		i := (j + rollRequests) % nRolled
		b := &r.c[i]
		keep := lo
		if kept[i] {
			n[i] -= extra[i]
			keep = lo - 1
			if n[i] < 0 && !h.cluster {
				// Fewer than none new with hystrix-go's oldest bucket
				// still summed: it was not (oldestKept judged wrong).
				n[i] += extra[i]
				keep = lo
			}
		}
		if !l.perRecord {
			r.refine(i, max(n[i], 0)/dt.Seconds())
		}
		if l.keepsOldest && r.steady(b, vals[i], keep, k, at) {
			r.lastNew[i] = n[i]
			out[i] = b.report(n[i])
			b.observe(n[i], dt)
			continue
		}
		if !h.cluster {
			n[i] = r.late(b, n[i], keep, dt)
		}
		if l.keepsOldest && !h.cluster && n[i] < 0 {
			n[i] = r.tooMany(b, n[i], keep, k)
		}
		r.attribute(b, n[i], keep, k, at)
		b.drop(keep)
		if vals[i] == 0 {
			// An empty window: every bucket in it is empty.
			clear(b.est)
			clear(b.held)
		}
		out[i] = b.report(n[i])
		b.observe(n[i], dt)
		r.lastNew[i] = n[i]
	}
	r.cur, r.last, r.lastDur = k, at, dt
	return out
}

// late keeps in the window events of the buckets that left it, when the
// read would otherwise report far more new events than the count's
// recent rate explains: a burst read within a bucket was attributed by
// time partly to the bucket before, which leaves the window a read
// earlier than the burst does (and a wrong guess of hystrix-go's oldest
// bucket does the same). They are taken as in the oldest bucket still in
// the window (keep), held there: they leave with it, and are not kept
// again. It returns the read's new events less those kept: the excess, as
// much of it as there are such events.
func (r *rollingCounts) late(b *bucketEstimates, n float64, keep int64, dt time.Duration) float64 {
	var movable float64
	for i := b.base; i < keep && i < b.base+int64(len(b.est)); i++ {
		if r.layout.perRecord && i > r.startHi {
			break // opossum's buckets after the first read are known exactly
		}
		movable += max(b.est[i-b.base]-b.held[i-b.base], 0)
	}
	if movable <= 0 {
		return n
	}
	expect := b.rate() * dt.Seconds()
	excess := n - expect - 1 - 4*math.Sqrt(expect)
	if r.layout.perRecord {
		// opossum's first window, spread evenly as nothing told how,
		// leaving: what seems new is taken as still in the window, as
		// far as it can be (its later buckets are known exactly).
		excess = n - expect
	}
	if excess <= 0 {
		return n
	}
	moved := min(movable, excess)
	b.add(keep, moved, true)
	return n - moved
}

// bucketOf is the bucket of a read at at: of the writer's clock, or
// (perRecord) the previous read's plus the buckets elapsed since, at
// least one. ok is false when the writer's clock went back.
func (r *rollingCounts) bucketOf(at time.Time, l rollingLayout) (k int64, ok bool) {
	if !r.started {
		return 0, true
	}
	if at.Before(r.last) {
		return 0, false
	}
	if !l.perRecord {
		return floorDiv(at.UnixNano(), int64(l.bucket)), true
	}
	steps := int64(math.Round(float64(at.Sub(r.last)) / float64(l.bucket)))
	return r.cur + max(steps, 1), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// start takes a read as the first: its counts are spread over the
// window's buckets in proportion to the time each covers (where in the
// window they came is not known).
func (r *rollingCounts) start(at time.Time, l rollingLayout, vals [nRolled]int64) {
	*r = rollingCounts{layout: l, started: true, last: at}
	if !l.perRecord {
		r.cur = floorDiv(at.UnixNano(), int64(l.bucket))
	}
	r.startHi = r.cur
	lo := r.cur - l.span() + 1
	for i := range nRolled {
		b := &r.c[i]
		n := float64(vals[i])
		if n == 0 {
			continue
		}
		if l.perRecord {
			for j := lo; j <= r.cur; j++ {
				b.add(j, n/float64(r.cur-lo+1), false)
			}
			continue
		}
		bl := int64(l.bucket)
		r.attributeSpan(b, n, lo*bl, at.UnixNano(), lo, r.cur)
	}
}

// attribute attributes a read's n new events to the buckets the time
// since the previous read covers within the window (from keep, the
// oldest bucket the read still sums, to the read's bucket k), in
// proportion to the time of each (how the events of the read were spread
// over the time is not known). When the oldest bucket was still summed (keep below the window's
// first, lo), the events all came before bucket k began. Negative n
// (too many events were attributed before, and reported) goes to bucket
// k: taking it from the buckets it came from is not possible (which they
// are is not known), and taking it from others would count it back twice
// (once paid back, once again when they leave).
func (r *rollingCounts) attribute(b *bucketEstimates, n float64, keep, k int64, at time.Time) {
	switch {
	case n == 0:
		return
	case n < 0:
		b.add(k, n, false)
		return
	case r.layout.perRecord:
		from := max(r.cur+1, keep)
		for i := from; i <= k; i++ {
			b.add(i, n/float64(k-from+1), false)
		}
		return
	}
	bl := int64(r.layout.bucket)
	from, to, last := max(r.last.UnixNano(), keep*bl), at.UnixNano(), k
	if keep < k-r.layout.span()+1 { // the oldest bucket still summed: nothing came in bucket k yet
		to, last = min(to, k*bl), k-1
	}
	first := max(r.cur, keep)
	r.attributeSpan(b, n, from, to, first, last)
	before := -1.0
	if b.next > 0 {
		before = b.recent[(b.next-1)%len(b.recent)]
	}
	b.last = spanned{n: n, before: before, from: from, to: to, first: first, last: last, ok: true}
}

// attributeSpan attributes n to buckets first..last in proportion to the
// part of (from, to] (ns of the writer's clock) in each, all to last when
// the span is empty.
func (r *rollingCounts) attributeSpan(b *bucketEstimates, n float64, from, to, first, last int64) {
	r.addSpan(b, n, from, to, first, last, -1, -1)
}

// addSpan adds n to buckets first..last as spread over (from, to] (ns of
// the writer's clock) at density ra (events a second) from from and rb
// after, switching where they make n; uniformly when they cannot (below
// 0, equal, or both too low or too high for n).
func (r *rollingCounts) addSpan(b *bucketEstimates, n float64, from, to, first, last int64, ra, rb float64) {
	bl := int64(r.layout.bucket)
	if to <= from || first > last {
		b.add(last, n, false)
		return
	}
	span := float64(to-from) / 1e9
	split, da, db := to, n/span, n/span
	// At rates far above the span's events (a guide of a fraction of an
	// event), the switch falls within a nanosecond's rounding of from or
	// to, and that rounding times the rate is added: uniformly then.
	if ra >= 0 && rb >= 0 && ra != rb && max(ra, rb)*span <= 1e3*max(math.Abs(n), 1) {
		if x := (n - rb*span) / (ra - rb); x >= 0 && x <= span {
			split, da, db = from+int64(x*1e9), ra, rb
		}
	}
	for i := max(first, floorDiv(from, bl)); i <= last; i++ {
		lo, hi := max(from, i*bl), min(to, (i+1)*bl)
		if hi <= lo {
			continue
		}
		at := float64(max(min(hi, split)-lo, 0)) / 1e9
		after := float64(max(hi-max(lo, split), 0)) / 1e9
		b.add(i, at*da+after*db, false)
	}
}

// refine makes the previous read's attribution by time again now that
// the rate after it (events a second of this read, after) is known: its
// events are taken as coming at the rate of the read before it from its
// start and at the rate after it to its end (a burst that began within
// it and went on came at its end). It moves events between the buckets
// it covered, which are all still in the window.
//
// A count of the calls' outcomes takes the shape requestCount's took, when
// they spanned the same time: every call counts in requestCount, which
// has the most events to tell the rates by.
func (r *rollingCounts) refine(i int, after float64) {
	b := &r.c[i]
	s := b.last
	b.last.ok = false
	if !s.ok || s.n <= 0 || s.first >= s.last || after < 0 {
		return
	}
	before := s.before
	if g := r.guide; i != rollRequests && g.ok && g.from == s.from && g.to == s.to && g.first == s.first && g.last == s.last && g.n >= 1 {
		before, after = g.before*s.n/g.n, g.after*s.n/g.n
	}
	if i == rollRequests {
		r.guide = s
		r.guide.after, r.guide.ok = after, true
	}
	r.addSpan(b, -s.n, s.from, s.to, s.first, s.last, -1, -1)
	r.addSpan(b, s.n, s.from, s.to, s.first, s.last, before, after)
}

// oldestKept decides, for each count of a hystrix-go read that crossed
// into a new bucket k, whether the read still summed the oldest bucket
// (lo - 1, whose estimate is extra): it did when the count had no event
// yet in bucket k (rolling.Number deletes the old buckets only on an
// event). n are the new events if it did not.
//
// Every call adds one to requestCount and to one of the counts of its
// outcome (success, failure, timeout, short-circuited, rejected), and
// every failed call to errorCount, all in the same second. So: the
// outcomes summed less requestCount is the oldest buckets of the
// outcomes whose count had no event yet in bucket k while requestCount
// had one; requestCount itself (the likeliest to have had one) is judged
// by its rate (keptLikelier), and when it had none, no count had. The
// errors are judged the same way against the failed outcomes, and the
// fallbacks (counted with the failures they serve) follow the errors.
func (r *rollingCounts) oldestKept(vals [nRolled]int64, n, extra [nRolled]float64, k int64, at time.Time) (kept [nRolled]bool) {
	kept[rollRequests] = extra[rollRequests] != 0 &&
		r.keptLikelier(n[rollRequests], n[rollRequests]-extra[rollRequests], r.c[rollRequests].rate(), k, at)
	if kept[rollRequests] {
		for i := range kept {
			kept[i] = extra[i] != 0
		}
		return kept
	}
	outcomes := []int{rollSuccess, rollFailure, rollTimeout, rollShortCircuited, rollSemaphoreRejected, rollThreadPoolRejected}
	failed := []int{rollFailure, rollTimeout, rollShortCircuited, rollSemaphoreRejected, rollThreadPoolRejected}
	var sum float64
	for _, i := range outcomes {
		sum += float64(vals[i])
	}
	r.subsetKept(&kept, outcomes, extra, sum-float64(vals[rollRequests]))
	// errorCount: the failed outcomes summed less it is the oldest
	// buckets of those kept, less errorCount's own if it was kept.
	var failedSum, keptExtra float64
	for _, i := range failed {
		failedSum += float64(vals[i])
		if kept[i] {
			keptExtra += extra[i]
		}
	}
	x := failedSum - float64(vals[rollErrors])
	kept[rollErrors] = extra[rollErrors] != 0 && math.Abs(x-(keptExtra-extra[rollErrors])) < math.Abs(x-keptExtra)
	for _, i := range []int{rollFallbackSuccess, rollFallbackFailure, rollBadRequest} {
		kept[i] = extra[i] != 0 && (kept[rollErrors] || extra[rollErrors] == 0 && r.keptLikelier(n[i], n[i]-extra[i], r.c[i].rate(), k, at))
	}
	return kept
}

// subsetKept sets kept for the counts among idx whose oldest buckets
// (extra) add up closest to x (the others' are 0 or were not kept), the
// fewest of them on a tie.
func (r *rollingCounts) subsetKept(kept *[nRolled]bool, idx []int, extra [nRolled]float64, x float64) {
	var cand []int
	for _, i := range idx {
		if extra[i] != 0 {
			cand = append(cand, i)
		}
	}
	best, bestDist, bestSize := 0, math.Abs(x), 0
	for set := 1; set < 1<<len(cand); set++ {
		var s float64
		size := 0
		for j, i := range cand {
			if set&(1<<j) != 0 {
				s += extra[i]
				size++
			}
		}
		if d := math.Abs(x - s); d < bestDist-1e-9 || (math.Abs(d-bestDist) <= 1e-9 && size < bestSize) {
			best, bestDist, bestSize = set, d, size
		}
	}
	for j, i := range cand {
		kept[i] = best&(1<<j) != 0
	}
}

// keptLikelier reports whether a count's read more likely still summed the
// oldest bucket than not: it did if the count had no event yet in the
// current bucket k, which with the count's recent rate per second is
// likely when the read came early in the bucket (probability
// e^(-rate*after)); its new events (n11) then all came in the time
// before the bucket began, else (n10) over the whole time since the
// previous read, at least one in bucket k. See newEventsLikelihood.
func (r *rollingCounts) keptLikelier(n10, n11, rate float64, k int64, at time.Time) bool {
	bl := int64(r.layout.bucket)
	secs := func(ns int64) float64 { return float64(ns) / 1e9 }
	rate = max(rate, 0.05)
	before := secs(max(k*bl-r.last.UnixNano(), 0))
	after := secs(max(at.UnixNano()-k*bl, 0))
	p11 := math.Exp(-rate * after)
	l10 := (1 - p11) * newEventsLikelihood(n10, rate*(before+after))
	l11 := p11 * newEventsLikelihood(n11, rate*before)
	return l11 > l10
}

// newEventsLikelihood is how likely a read's x new events are when mu
// were expected: as many as a Poisson count (in its normal
// approximation, widened by 2 events of estimation error) nine times in
// ten, else any number (a burst: exponential, of mean 50); fewer than
// none only by the estimation error.
func newEventsLikelihood(x, mu float64) float64 {
	v := mu + 2
	steady := math.Exp(-(x-mu)*(x-mu)/(2*v)) / math.Sqrt(2*math.Pi*v)
	burst := math.Exp(-max(x, 0)/50) / 50
	if x < 0 {
		burst *= math.Exp(-x * x / 8)
	}
	return 0.9*steady + 0.1*burst
}

// clearedRead is a read after the writer cleared its counts: the counts
// are the events since, and the events between the previous read and the
// clearing are estimated from each count's rate before (the window that
// held them is gone). When the clearing was is told by the calls since
// (requestCount) at the rate of calls before it.
func (r *rollingCounts) clearedRead(at time.Time, k int64, dt time.Duration, vals [nRolled]int64) (out [nRolled]int64) {
	window := time.Duration(r.layout.span()) * r.layout.bucket
	since := dt
	if rate := r.lastRequests / window.Seconds(); rate > 0 {
		since = min(dt, time.Duration(float64(vals[rollRequests])/rate*float64(time.Second)))
	}
	// Only between reads a stream's interval apart: across a longer
	// silence the rate before tells nothing.
	gap := dt - since
	if r.lastDur <= 0 || dt > 2*r.lastDur || dt > 2*r.layout.bucket {
		gap = 0
	}
	for i := range nRolled {
		b := &r.c[i]
		b.est, b.held = b.est[:0], b.held[:0]
		lost := 0.0
		if r.lastDur > 0 && r.lastNew[i] > 0 {
			lost = r.lastNew[i] / r.lastDur.Seconds() * gap.Seconds()
		}
		count := float64(vals[i])
		if r.layout.perRecord {
			b.add(k, count, false)
		} else {
			bl := int64(r.layout.bucket)
			from := at.UnixNano() - int64(since)
			r.attributeSpan(b, count, from, at.UnixNano(), floorDiv(from, bl), k)
		}
		n := count + lost
		out[i] = b.report(n)
		b.observe(n, dt)
		r.lastNew[i] = n
	}
	r.cur, r.last, r.lastDur = k, at, dt
	return out
}

// steady takes a read of a count whose last reads each saw the same
// number of new events, m (to within rounding), as steady traffic does:
// its window is taken as holding m events in each whole second (from
// keep, the oldest bucket the read sums, to k-1) and the rest, v less
// those, in the read's own second k, when that rest is between 0 and m.
// The read's new events are the same (the window's estimates still sum
// to v); what changes is which second they are in, and so what leaves
// the window later. Uniform attribution by time (attribute) is right on
// average for calls at random times, but steady calls keep their place
// in the second: with 2 calls a second at .463 and .963 s and reads at
// .95 s, it puts 0.1 of each read's 2 calls in the second before (1 is),
// and the estimate is short by 0.9 each time that second leaves, ever
// after. It reports whether it took the read so (after a read that
// crossed into the next bucket, k = r.cur+1, only).
func (r *rollingCounts) steady(b *bucketEstimates, v int64, keep, k int64, at time.Time) bool {
	m, ok := b.regular()
	if !ok || k != r.cur+1 || r.layout.bucket != time.Second {
		return false
	}
	rest := float64(v) - float64(k-keep)*m
	frac := float64(at.UnixNano()-k*int64(time.Second)) / 1e9
	if rest < -1e-6 || rest > m+1e-6 || math.Abs(rest-frac*m) > 1+0.05*m {
		return false
	}
	b.drop(keep)
	for j := keep; j < k; j++ {
		b.add(j, m-b.get(j), false)
	}
	b.add(k, max(rest, 0)-b.get(k), false)
	clear(b.held)
	b.last = spanned{}
	return true
}

// regular reports whether most of the count's last reads (4 of 5) saw
// the same number of new events, m (their median, at least one), to
// within half an event: a count at random times varies by about its
// square root.
func (b *bucketEstimates) regular() (m float64, ok bool) {
	if b.next < len(b.recent) {
		return 0, false
	}
	s := b.recent
	slices.Sort(s[:])
	m = s[len(s)/2]
	near := 0
	for _, v := range s {
		if math.Abs(v-m) <= 0.5 {
			near++
		}
	}
	return math.Round(m), m >= 0.5 && near >= len(s)-1
}

// tooMany takes a read of hystrix-go's counts that explains n fewer than
// none new (n < 0): the window's estimates sum to more than its count.
// The bucket that left it held more than its estimate, and the one after
// it (keep, the oldest still in the window, which shared a read's
// interval with it) less: its estimate gives back what it can, and those
// events are new at this read. What remains was reported too many: it is
// taken from the newest estimates (none below 0) and paid back from the
// reads that follow. It returns the read's new events: 0 or more.
func (r *rollingCounts) tooMany(b *bucketEstimates, n float64, keep, k int64) float64 {
	if x := min(-n, max(b.get(keep), 0)); x > 0 {
		b.add(keep, -x, false)
		b.held[keep-b.base] = min(b.held[keep-b.base], b.est[keep-b.base])
		n += x
	}
	for j := k; j >= keep && n < 0; j-- {
		if x := min(-n, max(b.get(j), 0)); x > 0 {
			b.add(j, -x, false)
			b.held[j-b.base] = min(b.held[j-b.base], b.est[j-b.base])
			b.owed -= x
			n += x
		}
	}
	b.owed += n
	return 0
}
