package breaker

import (
	"sync"
	"sync/atomic"
)

// window is a sliding window of recorded calls. Times are nanoseconds
// since the breaker was made. Implementations are safe for concurrent use.
type window interface {
	// record adds one call that ended at t, counted on stripe st (see
	// stripeHint). It returns the window right after it, and whether the
	// window needs judging at all: false when the call cannot have made
	// the breaker trip.
	record(t int64, failed, slow bool, st uint8) (counts, bool)
	// stats returns the window as it is at t, without changing it.
	stats(t int64) counts
}

// counts are a window's recorded calls, failures and slow calls.
type counts struct{ calls, fails, slow int64 }

func (c counts) stats() WindowStats { return makeStats(c.calls, c.fails, c.slow) }

const (
	markFailed = 1
	markSlow   = 2
)

// countWindow keeps the marks (failed, slow) of the last size recorded
// calls in a ring. Every mark but one goes into the ring under a short
// lock, in order. The exception is the common case, a plain success
// (neither failed nor slow) once the window holds enough calls to be
// judged: such a call cannot make the breaker trip, and its mark is the
// same as every other plain success's, so it is only counted, on the
// caller's stripe, without a lock or a shared write. Whoever next takes
// the lock (a failure, a slow call, a snapshot) first pushes the counted
// successes into the ring. Sequentially this is exactly the last size
// calls in order; concurrently, successes counted while a failure is being
// recorded may land on either side of it, as they would with any lock
// order.
type countWindow struct {
	size   int64
	warmAt int64 // from this many calls on, plain successes are only counted
	_      [64]byte
	// pending counts plain successes not yet in the ring, per stripe.
	pending [numStripes]struct {
		n atomic.Int64
		_ [56]byte
	}
	warm atomic.Bool // pos >= warmAt
	_    [63]byte

	mu          sync.Mutex
	marks       []uint8
	pos         int64 // calls pushed so far
	fails, slow int64 // marks in the ring
}

func newCountWindow(size, minCalls int) *countWindow {
	return &countWindow{size: int64(size), warmAt: int64(min(size, minCalls)), marks: make([]uint8, size)}
}

func (w *countWindow) record(_ int64, failed, slow bool, st uint8) (counts, bool) {
	if !failed && !slow && w.warm.Load() {
		w.pending[st%numStripes].n.Add(1)
		return counts{}, false
	}
	var mark uint8
	if failed {
		mark |= markFailed
	}
	if slow {
		mark |= markSlow
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	w.pushLocked(mark, 1)
	if w.pos >= w.warmAt {
		w.warm.Store(true)
	}
	return w.countsLocked(), true
}

// flushLocked pushes the counted plain successes into the ring.
func (w *countWindow) flushLocked() {
	var k int64
	for i := range w.pending {
		k += w.pending[i].n.Swap(0)
	}
	if k > 0 {
		w.pushLocked(0, k)
	}
}

// pushLocked pushes k calls with the same mark.
func (w *countWindow) pushLocked(mark uint8, k int64) {
	if k >= w.size { // every mark in the ring is replaced
		for i := range w.marks {
			w.marks[i] = mark
		}
		w.fails, w.slow = 0, 0
		if mark&markFailed != 0 {
			w.fails = w.size
		}
		if mark&markSlow != 0 {
			w.slow = w.size
		}
		w.pos += k
		return
	}
	for range k {
		i := w.pos % w.size
		if w.pos >= w.size { // evict the oldest
			old := w.marks[i]
			w.fails -= int64(old & markFailed)
			w.slow -= int64(old&markSlow) >> 1
		}
		w.marks[i] = mark
		w.fails += int64(mark & markFailed)
		w.slow += int64(mark&markSlow) >> 1
		w.pos++
	}
}

func (w *countWindow) countsLocked() counts {
	return counts{min(w.pos, w.size), w.fails, w.slow}
}

func (w *countWindow) stats(int64) counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	return w.countsLocked()
}

// timeWindow keeps the calls of the last n buckets of width nanoseconds
// each: a call ending at t falls in bucket t/width, and at time now the
// window holds buckets now/width-n+1 through now/width. It takes a short
// lock per record.
type timeWindow struct {
	mu      sync.Mutex
	width   int64
	buckets []bucket
}

type bucket struct {
	idx                int64 // which bucket this slot holds; -1 = none yet
	calls, fails, slow int64
}

func newTimeWindow(width int64, n int) *timeWindow {
	w := &timeWindow{width: width, buckets: make([]bucket, n)}
	for i := range w.buckets {
		w.buckets[i].idx = -1
	}
	return w
}

func (w *timeWindow) record(t int64, failed, slow bool, _ uint8) (counts, bool) {
	t = max(t, 0) // the breaker's time is never negative; a slot index must not be either
	bi := t / w.width
	n := int64(len(w.buckets))
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &w.buckets[bi%n]
	if b.idx < bi {
		*b = bucket{idx: bi}
	}
	if b.idx == bi { // else: the call ended so long ago that its bucket has left the window
		b.calls++
		if failed {
			b.fails++
		}
		if slow {
			b.slow++
		}
	}
	return w.sumLocked(t), true
}

func (w *timeWindow) sumLocked(t int64) counts {
	cur := t / w.width
	lo := cur - int64(len(w.buckets)) + 1
	var calls, fails, slow int64
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.idx >= lo && b.idx <= cur {
			calls += b.calls
			fails += b.fails
			slow += b.slow
		}
	}
	return counts{calls, fails, slow}
}

func (w *timeWindow) stats(t int64) counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sumLocked(t)
}
