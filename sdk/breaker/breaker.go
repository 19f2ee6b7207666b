package breaker

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker is a circuit breaker guarding calls to one dependency. Make one
// with New. All its methods are safe for concurrent use.
//
// The state lives in an epoch (one per generation) that is swapped
// atomically on every transition, so that a successful call through a
// closed breaker with a count window takes no lock and writes no memory
// shared with other cores: it loads the epoch, reads the clock twice
// (start and end, for the latency histogram) and adds to counters striped
// by goroutine. While some breaker of the process is hot (100,000 calls a
// second or more on one goroutine), a breaker whose decisions never
// depend on a call's duration takes those two readings from a coarse
// clock instead, one atomic load each (see coarseClock in coarse.go: 1 ms
// resolution, for the latency histogram of successful closed calls only).
// Failures, slow calls, time windows, half-open probes and
// transitions take a short per-breaker lock; no lock is ever held while
// user code or an observer runs, but for the Clock's Now and AfterFunc
// under the CallTimeout queue's lock, which a panic of theirs releases
// (every lock is released by defer). A Config.Clock that steps back does
// not move the breaker's time back, nor stop it (see Clock).
type Breaker struct {
	name      string
	cfg       Config
	clock     Clock // nil: the system clock, read with time.Since(base)
	timers    Clock // never nil: schedules CallTimeout
	base      time.Time
	slowNs    int64
	timeoutNs int64
	plain     bool       // no CallTimeout and no bulkhead: execute's closed fast path applies
	coarseOK  bool       // plain, system clock, count window, no slow-call detection: a hot call may read the coarse clock
	coarseOff int64      // b.base - procBase, ns: the coarse clock's reading minus this is breaker time
	shadows   []*Breaker // Config.Shadows, each a breaker that never rejects (see shadow.go); nil: none
	shadow    string     // for a shadow: its name (Transition.Shadow); "" for a live breaker

	ep atomic.Pointer[epoch]
	_  [56]byte

	ctr      *counters    // apart, so that it starts on a cache line
	inflight atomic.Int64 // kept only when MaxConcurrent > 0 (the bulkhead)
	tq       timeoutQueue // calls with a CallTimeout in flight
	expireFn func()       // b.expire, made once
	// With a Config.Clock (see now): the latest time returned (ns since
	// base), the offset added to the clock's readings (ns; only grows,
	// stored under stepMu) and how many times a reading stepped back
	// (Snapshot.ClockStepsBack).
	lastNow, clockOff, stepsBack atomic.Int64
	stepMu                       sync.Mutex // serializes the moves of clockOff

	mu         sync.Mutex // guards the fields below and every epoch transition
	gen        uint64
	lastOpen   float64 // the last open duration, in nanoseconds, before jitter
	pending    []pendingTransition
	delivering bool
	observers  []*observer // copy on write
}

// epoch is one generation of a breaker: its state and what that state
// keeps. A call remembers the epoch it was admitted in; when it ends, it
// changes the state machine only if that epoch is still current.
type epoch struct {
	gen   uint64
	state State
	since int64  // when the breaker entered state (ns since base): the transition's time
	win   window // Closed and ForcedClosed

	openUntil int64         // Open: when it becomes half-open (ns since base)
	openDur   time.Duration // Open: how long it stays open

	probes, successes int // HalfOpen: in flight, consecutive successes; guarded by Breaker.mu

	until atomic.Int64            // forced states: when they run out (ns since base); 0 = never
	cmd   atomic.Pointer[Command] // forced states: the command holding them

	ramp *ramp // Closed after half-open, with Config.RampDuration: the ramp; nil = none
}

// ramp is the rising share of calls a closed epoch admits after a
// recovery (Config.RampDuration). Calls read active (one atomic load)
// while it lasts; the first admission at or after until clears it, and
// from then on the epoch is an ordinary closed one.
type ramp struct {
	from, until int64         // breaker time: when it started (the closing) and ends
	active      atomic.Bool   // still ramping
	credit      atomic.Uint64 // admissions owed, 32.32 fixed point (see admit)
}

// share is the share of calls (0..1) the ramp admits at now.
func (r *ramp) share(now int64) float64 {
	if now >= r.until {
		return 1
	}
	return float64(max(now-r.from, 0)) / float64(r.until-r.from)
}

// admit decides whether the ramp admits a call at now. Each call adds
// the share at its time to a credit (fixed point, 32 fraction bits); the
// call that carries the credit past a whole number is admitted. So the
// ramp admits share of the calls at each moment, spread evenly, and the
// same calls in every replay.
func (r *ramp) admit(now int64) bool {
	if now >= r.until {
		r.active.Store(false)
		return true
	}
	inc := uint64(r.share(now) * (1 << 32))
	c := r.credit.Add(inc)
	return c>>32 != (c-inc)>>32
}

// ramping reports whether ep is a closed epoch still ramping.
func (ep *epoch) ramping() bool { return ep.ramp != nil && ep.ramp.active.Load() }

// due reports whether ep has a transition due at now that is made lazily:
// open > half_open, or a forced state's expiry.
func (ep *epoch) due(now int64) bool {
	switch ep.state {
	case Open:
		return now >= ep.openUntil
	case ForcedOpen, ForcedClosed:
		u := ep.until.Load()
		return u != 0 && now >= u
	}
	return false
}

// New returns a closed breaker named name (required; it names the breaker
// in transitions and snapshots) configured by cfg, whose zero fields take
// their defaults. It returns an error wrapping ErrInvalidConfig that names
// the bad field if cfg is invalid.
func New(name string, cfg Config) (*Breaker, error) {
	if name == "" {
		return nil, invalidf("name is required")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Breaker{name: name, cfg: c, clock: c.Clock, ctr: new(counters), slowNs: int64(c.SlowCallDuration), timeoutNs: int64(c.CallTimeout)}
	if c.Clock == nil {
		b.timers = systemClock{}
		b.base = time.Now()
	} else {
		b.timers = c.Clock
		b.base = c.Clock.Now()
	}
	b.expireFn = b.expire
	b.plain = c.CallTimeout == 0 && c.MaxConcurrent == 0
	b.coarseOff = int64(b.base.Sub(procBase))
	// A breaker made before procBase is in a testing/synctest bubble (its
	// fake time starts in 2000): the coarse clock runs on real time.
	b.coarseOK = b.plain && c.Clock == nil && c.Window.Kind == CountWindow && c.SlowCallDuration == 0 && b.coarseOff >= 0
	for _, s := range c.Shadows {
		sh := b.newShadow(s)
		b.shadows = append(b.shadows, sh)
		// A shadow that judges durations needs the precise clock too.
		b.coarseOK = b.coarseOK && sh.cfg.Window.Kind == CountWindow && sh.slowNs == 0 && sh.timeoutNs == 0
	}
	b.ep.Store(b.newEpochLocked(Closed))
	return b, nil
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Config returns the breaker's configuration with every default applied.
func (b *Breaker) Config() Config { return b.cfg }

// clockRange is how far from the breaker's creation a Config.Clock's
// reading is believed: ±2^61 ns, about 73 years. A reading beyond (the
// zero time.Time, a clock gone wild) is ignored: it is taken as the latest
// time seen, moves no offset, and is counted in stepsBack. The breaker's
// time is capped at clockRange too, so that the offset (below 2^62) and
// the sums made from the breaker's time cannot overflow.
const clockRange = 1 << 61

// now returns the breaker's time: nanoseconds since the breaker was made,
// never negative and never before a time already returned (to a call that
// returned before this one began).
//
// The system clock (time.Since reads its monotonic part) cannot go back.
// A Config.Clock can (a clock made of time.Now().UTC() has lost the
// monotonic reading and steps back with NTP): the breaker's time is then
// its reading plus an offset, which starts at 0 and only grows. A
// reading that would put the breaker's time before the latest one
// returned moves the offset so that this reading is the latest time, and
// counts one step back: from there the breaker's time goes on at the
// clock's own rate, as Go's monotonic clock goes on when the wall clock
// is set back. Clamping instead (the previous design) stopped the
// breaker's time for the whole size of the step, holding an open breaker
// open until the clock caught up.
//
// Lock-free but for a step back, which takes b.stepMu after the reading
// (the Clock's Now never runs under it; it may run under the CallTimeout
// queue's lock, which is taken before b.stepMu, never after).
func (b *Breaker) now() int64 {
	if b.clock == nil {
		return int64(time.Since(b.base))
	}
	// Both before the reading, last first: the offset read is at least the
	// one that made last, so a time below last is a clock that went back.
	last := b.lastNow.Load()
	off := b.clockOff.Load()
	r := int64(b.clock.Now().Sub(b.base)) // saturates at ±292 years
	if r < -clockRange || r > clockRange {
		b.stepsBack.Add(1)
		return b.lastNow.Load()
	}
	t := min(r+off, clockRange)
	if t < last {
		return b.stepBack(r, last)
	}
	b.seen(t)
	return t
}

// seen raises b.lastNow to t if it is below.
func (b *Breaker) seen(t int64) {
	for last := b.lastNow.Load(); t > last && !b.lastNow.CompareAndSwap(last, t); {
		last = b.lastNow.Load()
	}
}

// stepBack handles a reading r (before the offset) that put the breaker's
// time below last, the latest time returned before it was taken: unless
// another reading as far back has already moved the offset, it moves the
// offset so that r is the latest time returned, counts the step, and
// returns that time.
func (b *Breaker) stepBack(r, last int64) int64 {
	b.stepMu.Lock()
	defer b.stepMu.Unlock()
	if t := min(r+b.clockOff.Load(), clockRange); t >= last { // already absorbed
		b.seen(t)
		return t
	}
	latest := b.lastNow.Load()   // >= last; no reading stores below it
	b.clockOff.Store(latest - r) // grows: r+off < last <= latest; below 2^62
	b.stepsBack.Add(1)
	return latest
}

// wall turns a time from now into a time.Time.
func (b *Breaker) wall(t int64) time.Time { return b.base.Add(time.Duration(t)) }

func (b *Breaker) newWindow() window {
	w := b.cfg.Window
	if w.Kind == TimeWindow {
		return newTimeWindow(int64(w.Duration)/int64(w.Buckets), w.Buckets)
	}
	return newCountWindow(w.Size, b.cfg.MinimumCalls)
}

// newEpochLocked starts a new generation in state s, with an empty window
// if s keeps one. b.mu must be held (or b not yet shared).
func (b *Breaker) newEpochLocked(s State) *epoch {
	b.gen++
	ep := &epoch{gen: b.gen, state: s}
	if s == Closed || s == ForcedClosed {
		ep.win = b.newWindow()
	}
	return ep
}

type pendingTransition struct {
	t   Transition
	obs []*observer // the observers subscribed when it happened
}

// transitionLocked moves the breaker from epoch from to a new generation
// in state to, at time at, and queues the transition for the observers.
// until and cmd are the forced state's expiry and command. b.mu must be
// held; the caller calls deliver after unlocking.
func (b *Breaker) transitionLocked(from *epoch, to State, at int64, cause Cause, until int64, cmd *Command) *epoch {
	ep := b.newEpochLocked(to)
	ep.since = at
	if cause.Kind == CauseProbesSucceeded && b.cfg.RampDuration > 0 { // half_open > closed by its probes; a command's closing never ramps
		ep.ramp = &ramp{from: at, until: at + int64(b.cfg.RampDuration)}
		ep.ramp.active.Store(true)
	}
	if to == Open {
		ep.openDur = b.nextOpenLocked(from.state == HalfOpen)
		ep.openUntil = at + int64(ep.openDur)
	}
	if until != 0 {
		ep.until.Store(until)
		cause.ExpiresAt = b.wall(until)
	}
	ep.cmd.Store(cmd)
	b.ep.Store(ep)
	b.pending = append(b.pending, pendingTransition{
		t: Transition{
			Breaker: b.name, From: from.state, To: to, At: b.wall(at),
			Generation: ep.gen, Cause: cause, OpenDuration: ep.openDur, Shadow: b.shadow,
		},
		obs: b.observers,
	})
	return ep
}

// nextOpenLocked returns how long the breaker opens for: the base
// OpenDuration after a trip from closed, the previous duration times the
// backoff multiplier (capped) after a failed probe, then jittered.
func (b *Breaker) nextOpenLocked(afterProbe bool) time.Duration {
	bo := b.cfg.OpenBackoff
	if !afterProbe || bo.Multiplier <= 1 || b.lastOpen == 0 {
		b.lastOpen = float64(b.cfg.OpenDuration)
	} else {
		b.lastOpen *= bo.Multiplier
		if bo.Max > 0 && b.lastOpen > float64(bo.Max) {
			b.lastOpen = float64(bo.Max)
		}
	}
	d := b.lastOpen
	if bo.Jitter > 0 {
		d *= 1 + bo.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}

// settle makes the lazily made transitions due at now and returns the
// current epoch.
func (b *Breaker) settle(now int64) *epoch {
	ep := func() *epoch {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.settleLocked(now)
	}()
	b.deliver()
	return ep
}

func (b *Breaker) settleLocked(now int64) *epoch {
	ep := b.ep.Load()
	for ep.due(now) {
		if ep.state == Open {
			ep = b.transitionLocked(ep, HalfOpen, ep.openUntil, Cause{Kind: CauseOpenElapsed}, 0, nil)
			continue
		}
		ep = b.transitionLocked(ep, Closed, ep.until.Load(), Cause{Kind: CauseExpired, Command: ep.cmd.Load()}, 0, nil)
	}
	return ep
}

// current returns the epoch in force at now.
func (b *Breaker) current(now int64) *epoch {
	ep := b.ep.Load()
	if ep.due(now) {
		ep = b.settle(now)
	}
	return ep
}

// admit decides whether a call may start now. The returned Call carries
// the start time and the epoch it was admitted in.
func (b *Breaker) admit() (Call, error) {
	st := stripeHint()
	for {
		ep := b.ep.Load()
		if ep.state == ForcedOpen && ep.until.Load() == 0 { // no clock needed
			b.ctr.add(st, cRejForced)
			return Call{}, ErrForcedOpen
		}
		now := b.now()
		if ep.due(now) {
			ep = b.settle(now)
		}
		probe := false
		switch ep.state {
		case Closed:
			if ep.ramping() && !ep.ramp.admit(now) {
				b.ctr.add(st, cRejRamp)
				return Call{}, ErrRamp
			}
		case Open:
			b.ctr.add(st, cRejOpen)
			return Call{}, ErrOpen
		case ForcedOpen:
			b.ctr.add(st, cRejForced)
			return Call{}, ErrForcedOpen
		case HalfOpen:
			ok, stale := b.takeProbe(ep)
			if stale {
				continue
			}
			if !ok {
				b.ctr.add(st, cRejHalfOpen)
				return Call{}, ErrHalfOpenFull
			}
			probe = true
		}
		if m := b.cfg.MaxConcurrent; m > 0 {
			if b.inflight.Add(1) > int64(m) {
				b.inflight.Add(-1)
				if probe {
					b.releaseProbe(ep)
				}
				b.ctr.add(st, cRejBulkhead)
				return Call{}, ErrBulkheadFull
			}
		}
		b.ctr.add(st, cAdmitted)
		return Call{b: b, ep: ep, start: now, probe: probe, stripe: st}, nil
	}
}

// takeProbe takes a probe slot of the half-open epoch ep. stale says ep
// is no longer current (the caller looks again).
func (b *Breaker) takeProbe(ep *epoch) (ok, stale bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() != ep {
		return false, true
	}
	if ep.probes >= b.cfg.HalfOpenMaxCalls {
		return false, false
	}
	ep.probes++
	return true, false
}

func (b *Breaker) releaseProbe(ep *epoch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() == ep {
		ep.probes--
	}
}

// finish records the end of call c at time end with outcome o.
func (b *Breaker) finish(c *Call, o Outcome, end int64) {
	if b.cfg.MaxConcurrent > 0 {
		b.inflight.Add(-1)
	}
	d := max(end-c.start, 0)
	st := c.stripe
	b.ctr.observe(st, d)
	if b.shadows != nil {
		b.feedShadows(o, d, end, st)
	}
	slow := b.slowNs > 0 && d >= b.slowNs && o.recorded()
	b.ctr.add(st, outcomeCounter[o])
	if slow {
		b.ctr.add(st, cSlow)
	}
	if c.probe {
		b.probeDone(c.ep, o, slow, end)
		return
	}
	ep := c.ep
	if !o.recorded() || ep.win == nil || b.ep.Load() != ep {
		return
	}
	s, judge := ep.win.record(end, o.failed(), slow, st)
	if judge && ep.state == Closed && b.trips(s) {
		b.trip(ep, end)
	}
}

// trips reports whether a closed breaker whose window holds c opens.
// The rates are computed as resilience4j does (failures*100/calls) and
// compared with >=, so that a rate equal to its threshold trips.
func (b *Breaker) trips(c counts) bool {
	if c.calls < int64(b.cfg.MinimumCalls) || c.calls == 0 || (c.fails == 0 && c.slow == 0) {
		return false
	}
	s := c.stats()
	return s.FailureRate >= b.cfg.FailureRateThreshold ||
		(b.slowNs > 0 && s.SlowCallRate >= b.cfg.SlowCallRateThreshold)
}

// trip opens the breaker if ep is still current and its window, judged
// again under the lock, still reaches a threshold.
func (b *Breaker) trip(ep *epoch, end int64) {
	if b.tripLocked(ep, end) {
		b.deliver()
	}
}

// tripLocked takes b.mu for trip and reports whether it opened the
// breaker.
func (b *Breaker) tripLocked(ep *epoch, end int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() != ep {
		return false
	}
	c := ep.win.stats(end)
	if !b.trips(c) {
		return false
	}
	s := c.stats()
	cause := Cause{Kind: CauseFailureRate, FailureRate: s.FailureRate, SlowCallRate: s.SlowCallRate, Threshold: b.cfg.FailureRateThreshold, Window: s}
	if ep.ramping() {
		cause.RampShare = ep.ramp.share(end)
	}
	if s.FailureRate < b.cfg.FailureRateThreshold {
		cause.Kind, cause.Threshold = CauseSlowCallRate, b.cfg.SlowCallRateThreshold
	}
	b.transitionLocked(ep, Open, end, cause, 0, nil)
	return true
}

// probeDone ends a probe admitted in the half-open epoch ep.
func (b *Breaker) probeDone(ep *epoch, o Outcome, slow bool, end int64) {
	b.probeDoneLocked(ep, o, slow, end)
	b.deliver()
}

// probeDoneLocked takes b.mu for probeDone.
func (b *Breaker) probeDoneLocked(ep *epoch, o Outcome, slow bool, end int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() != ep {
		return
	}
	ep.probes--
	switch {
	case o.failed() || (slow && o == Success):
		how := "slow"
		switch o {
		case Failure:
			how = "error"
		case Timeout:
			how = "timeout"
		case Panic:
			how = "panic"
		}
		b.transitionLocked(ep, Open, end, Cause{Kind: CauseProbeFailed, ProbeOutcome: how}, 0, nil)
	case o == Success:
		ep.successes++
		if ep.successes >= b.cfg.HalfOpenSuccessThreshold {
			b.transitionLocked(ep, Closed, end, Cause{Kind: CauseProbesSucceeded}, 0, nil)
		}
	}
}

// State returns the breaker's state now. Its only side effect is that a
// due open > half_open change or a forced state's expiry happens (and is
// delivered to observers) if it has not been seen yet.
func (b *Breaker) State() State { return b.current(b.now()).state }

// Snapshot returns the breaker's state, counters and sliding window now.
// Like State, its only side effect is to make due lazy transitions
// visible.
func (b *Breaker) Snapshot() Snapshot {
	now := b.now()
	return b.snapshot(b.current(now), now)
}

func (b *Breaker) snapshot(ep *epoch, now int64) Snapshot {
	s := Snapshot{
		Name: b.name, State: ep.state, Generation: ep.gen, At: b.wall(now), Since: b.wall(ep.since),
		Totals:                b.ctr.totals(),
		FailureRateThreshold:  b.cfg.FailureRateThreshold,
		SlowCallRateThreshold: b.cfg.SlowCallRateThreshold,
		MinimumCalls:          b.cfg.MinimumCalls,
		ClockStepsBack:        b.stepsBack.Load(),
	}
	if b.slowNs == 0 {
		s.SlowCallRateThreshold = 0
	}
	var sum int64
	s.Latency, sum = b.ctr.latency()
	s.LatencySum = time.Duration(sum)
	t := s.Totals
	s.InFlight = max(int64(t.Admitted)-int64(t.Successes+t.Failures+t.Ignored), 0)
	if ep.win != nil {
		s.Window = ep.win.stats(now).stats()
	}
	s.RampShare = 1
	if ep.ramping() && now < ep.ramp.until {
		s.RampUntil, s.RampShare = b.wall(ep.ramp.until), ep.ramp.share(now)
	}
	if ep.state == ForcedOpen || ep.state == ForcedClosed {
		if u := ep.until.Load(); u != 0 {
			s.ForcedUntil = b.wall(u)
		}
		s.Forced = ep.cmd.Load()
	}
	return s
}

// outcomeCounter is the counter each outcome ends in.
var outcomeCounter = [...]int{Success: cSuccesses, Failure: cErrors, Timeout: cTimeouts, Panic: cPanics, Ignored: cIgnored, Canceled: cIgnored}
