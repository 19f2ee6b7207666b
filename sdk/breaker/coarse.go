package breaker

import (
	"sync/atomic"
	"time"
)

// The coarse clock: a reading of the system's monotonic clock kept in one
// atomic word by a ticker goroutine, so that a call reads a load instead
// of a clock (a monotonic clock read costs about 30 ns, which is most of
// a successful call's cost). It runs only while some breaker is hot and
// stops by itself soon after, so it costs nothing to a breaker that is
// not, and never outlives a burst of calls by more than coarseLease.
//
// Only the latency histogram of successful closed calls is measured with
// it, while it runs (while some breaker of the process is hot), and only
// on a breaker whose decisions never depend on a call's duration (system clock, count window, no slow-call
// detection, no CallTimeout, no bulkhead): see Breaker.executeClosed.
// Every decision (trips, half-open, timeouts, slow calls, time-window
// buckets, transition times) keeps reading the precise clock.
//
// Why a hot breaker only: the ticker costs a goroutine wakeup (about a
// microsecond of CPU) per coarseTick, which pays for itself only above
// some tens of thousands of calls a second. A breaker is hot while one of
// its counter stripes (about one goroutine) admits hotCalls calls in less
// than hotSpan, i.e. at 100,000 calls a second or more; while no breaker
// is, a call reads the precise clock twice, exactly as before.
//
// Resolution: a coarse reading lags the true time by less than one tick
// (coarseTick, 1 ms, more when the scheduler runs the ticker late), and a
// hot call's latency is the difference of two readings: a call that took
// d is counted as a whole number of ticks within one tick of d. When the
// ticker runs late, a call in flight across that late tick is counted at
// up to the delay. It runs late when the process is short of CPU: with
// every P busy, a due timer waits for the scheduler's next preemption
// point (about every 10 ms of CPU; ticks 50-250 ms apart were seen with
// three busy goroutines on 2 Ps of a machine at load average 20). Then
// a call of duration d straddles a tick with probability d/gap and is
// counted at about the gap: LatencySum stays right on average, but the
// histogram's tail moves up, for calls of a millisecond by about as much
// as preemption itself (which the precise clock counts) moves their real
// latency in such a process. For calls of microseconds, the usual hot
// case, such straddlers are rare (TestCoarseClockOnAHotBreaker allows 1 %
// beyond the first bucket under the race detector on a busy machine). Its
// latency bucket can differ from the precise one only for calls within a
// tick of a bucket bound (1 ms, 2 ms, 5 ms: a 1.5 ms call may be counted
// at 1 ms or 2 ms); LatencySum stays right on average (a call starting at
// a uniformly random phase of the tick is counted ticks*coarseTick with
// expectation d).
type coarseClock struct {
	now     atomic.Int64 // the latest tick, ns since procBase; 0 = not ticking
	lease   atomic.Int64 // ns since procBase: the ticker stops at its first tick past this
	running atomic.Bool  // a ticker goroutine runs (or is starting)
	starts  atomic.Int64 // ticker goroutines started (for tests)
}

// procBase is the origin of the coarse clock's readings.
var procBase = time.Now()

var coarse coarseClock

const (
	coarseTick  = time.Millisecond      // how often the coarse clock is read
	coarseLease = 50 * time.Millisecond // how long it runs after the last hot check
	hotCalls    = 1024                  // a stripe checks whether it is hot every hotCalls admissions
	hotSpan     = 10 * time.Millisecond // hot: hotCalls admissions on one stripe in less than this
)

// want asks for the coarse clock for the next coarseLease, starting the
// ticker if it is not running. Inside a testing/synctest bubble, whose
// fake time is before procBase, it does nothing: the ticker would run on
// the bubble's time (and belong to the bubble).
func (c *coarseClock) want() {
	t := int64(time.Since(procBase))
	if t <= 0 {
		return
	}
	c.lease.Store(t + int64(coarseLease))
	if !c.running.Load() && c.running.CompareAndSwap(false, true) {
		c.starts.Add(1)
		c.now.Store(t)
		go c.run()
	}
}

// run ticks until the lease has passed. A want racing with the stop (it
// saw the ticker running just before it stopped) leaves it stopped: the
// next hot check starts it again, and meanwhile calls read the precise
// clock.
func (c *coarseClock) run() {
	tk := time.NewTicker(coarseTick)
	defer tk.Stop()
	for range tk.C {
		t := max(int64(time.Since(procBase)), 1)
		if t >= c.lease.Load() {
			c.now.Store(0)
			c.running.Store(false)
			return
		}
		c.now.Store(t)
	}
}

// checkHot runs every hotCalls admissions of stripe st, with the call's
// start t (breaker time): if the stripe's previous check was less than
// hotSpan ago, the breaker is hot and asks for the coarse clock (which
// then reads the system clock once more).
func (b *Breaker) checkHot(st uint8, t int64) {
	prev := b.ctr.s[st%numStripes].hotAt.Swap(t)
	if prev != 0 && t-prev < int64(hotSpan) && t > prev {
		coarse.want()
	}
}
