package breaker

import (
	"sync"
	"sync/atomic"
)

// window is a sliding window of recorded calls. Times are nanoseconds
// since the breaker was made. Implementations are safe for concurrent use.
type window interface {
	// record adds one call that ended at t and returns the window right
	// after it.
	record(t int64, failed, slow bool) counts
	// stats returns the window as it is at t, without changing it.
	stats(t int64) counts
}

// counts are a window's recorded calls, failures and slow calls.
type counts struct{ calls, fails, slow int64 }

func (c counts) stats() WindowStats { return makeStats(c.calls, c.fails, c.slow) }

const (
	slotUsed   = 1
	slotFailed = 2
	slotSlow   = 4
)

// countWindow keeps the last size recorded calls in a ring, without a
// lock: a record claims a position with one atomic add and swaps its mark
// into the slot, adjusting the failure and slow counts by the difference
// from the mark it evicted. Under concurrency two records that claim
// positions size apart may land in the other's order; the counts always
// match the slots.
type countWindow struct {
	size   int64
	stride int64 // slots apart that consecutive calls' marks are kept
	slots  []atomic.Uint32
	// pos is written by every call; the padding keeps it off the cache
	// lines of the fields read by every call, wherever the allocator puts
	// the struct.
	_     [64]byte
	pos   atomic.Int64 // records so far
	_     [64]byte
	fails atomic.Int64
	slow  atomic.Int64
}

// spreadSlots is the largest window whose consecutive marks are kept on
// different cache lines (16 slots apart), so that calls ending at the same
// time on different cores do not write the same line; larger windows pack
// their marks (64 KiB at most is spent on spreading).
const spreadSlots = 1024

func newCountWindow(size int) *countWindow {
	stride := int64(1)
	if size <= spreadSlots {
		stride = 16
	}
	return &countWindow{size: int64(size), stride: stride, slots: make([]atomic.Uint32, int64(size)*stride)}
}

func (w *countWindow) record(_ int64, failed, slow bool) counts {
	mark := uint32(slotUsed)
	if failed {
		mark |= slotFailed
	}
	if slow {
		mark |= slotSlow
	}
	p := w.pos.Add(1) - 1
	old := w.slots[(p%w.size)*w.stride].Swap(mark)
	if d := int64(mark&slotFailed)>>1 - int64(old&slotFailed)>>1; d != 0 {
		w.fails.Add(d)
	}
	if d := int64(mark&slotSlow)>>2 - int64(old&slotSlow)>>2; d != 0 {
		w.slow.Add(d)
	}
	return w.judge(p + 1)
}

func (w *countWindow) judge(n int64) counts {
	calls := min(n, w.size)
	return counts{calls, clamp(w.fails.Load(), calls), clamp(w.slow.Load(), calls)}
}

func (w *countWindow) stats(int64) counts { return w.judge(w.pos.Load()) }

// clamp keeps a count read while concurrent records are half done within
// 0..max.
func clamp(v, max int64) int64 {
	if v < 0 {
		return 0
	}
	if v > max {
		return max
	}
	return v
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

func (w *timeWindow) record(t int64, failed, slow bool) counts {
	bi := t / w.width
	n := int64(len(w.buckets))
	w.mu.Lock()
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
	s := w.sumLocked(t)
	w.mu.Unlock()
	return s
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
