package adapter

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// Rejection is why a library's breaker refused a call.
type Rejection uint8

// Reasons for a rejection, counted in the matching breaker.Totals field.
const (
	RejectedOpen         Rejection = iota // the breaker is open
	RejectedHalfOpenFull                  // half-open and no probe is free
	RejectedForcedOpen                    // an operator holds it open
	RejectedBulkhead                      // the library's concurrency limit had no room
)

// Meter counts one adapted breaker's calls as breaker.Totals and a latency
// histogram over breaker.LatencyBounds, and delivers its transitions to
// subscribers. All its methods are safe for concurrent use; counting is
// lock-free, and subscribers are called outside any lock of the Meter,
// one transition at a time, in the order Transition was called.
type Meter struct {
	name  string
	clock breaker.Clock

	admitted, successes, errors, timeouts, panics, ignored atomic.Uint64
	rejected                                               [4]atomic.Uint64 // by Rejection
	fallbackOK, fallbackFailed                             atomic.Uint64
	latency                                                [len(bounds) + 1]atomic.Uint64
	latencySum                                             atomic.Int64 // ns
	inFlight                                               atomic.Int64

	mu         sync.Mutex // guards the fields below
	generation uint64
	observers  []*observer
	pending    []pending
	delivering bool
}

type observer struct {
	fn       func(breaker.Transition)
	canceled atomic.Bool
}

type pending struct {
	t   breaker.Transition
	obs []*observer
}

// bounds are breaker.LatencyBounds in nanoseconds (a private copy).
var bounds = [...]int64{1e6, 2e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6, 1e9, 2.5e9, 5e9, 10e9}

// NewMeter returns a Meter for the breaker called name. clock times calls
// and stamps transitions; nil means the system clock.
func NewMeter(name string, clock breaker.Clock) *Meter {
	if clock == nil {
		clock = breaker.SystemClock()
	}
	return &Meter{name: name, clock: clock}
}

// Name returns the breaker's name.
func (m *Meter) Name() string { return m.name }

// Now returns the Meter's clock reading.
func (m *Meter) Now() time.Time { return m.clock.Now() }

// Begin counts a call the library admitted and returns its start, to be
// passed to End when it ends.
func (m *Meter) Begin() time.Time {
	m.admitted.Add(1)
	m.inFlight.Add(1)
	return m.clock.Now()
}

// End counts how a call begun at start ended, as sdk/breaker would:
// Failure, Timeout and Panic are failures; Ignored and Canceled are
// counted in Totals.Ignored and, unlike the others, not timed.
func (m *Meter) End(start time.Time, o breaker.Outcome) {
	m.inFlight.Add(-1)
	m.ended(o, m.clock.Now().Sub(start))
}

// Record counts a call the library admitted that ended with o after d, as
// Begin and End around it would: for a library that reports each call's
// outcome and duration after the fact (hystrix-go's metric collectors)
// rather than letting the adapter wrap the call. A negative d counts as
// 0; Ignored and Canceled are not timed.
func (m *Meter) Record(o breaker.Outcome, d time.Duration) {
	m.admitted.Add(1)
	m.ended(o, d)
}

// ended counts how an admitted call ended after d.
func (m *Meter) ended(o breaker.Outcome, d time.Duration) {
	switch o {
	case breaker.Success:
		m.successes.Add(1)
	case breaker.Failure:
		m.errors.Add(1)
	case breaker.Timeout:
		m.timeouts.Add(1)
	case breaker.Panic:
		m.panics.Add(1)
	default:
		m.ignored.Add(1)
		return
	}
	ns := max(int64(d), 0)
	i := len(bounds)
	for j, b := range bounds {
		if ns <= b {
			i = j
			break
		}
	}
	m.latency[i].Add(1)
	m.latencySum.Add(ns)
}

// Reject counts a call the library refused.
func (m *Meter) Reject(r Rejection) {
	if int(r) < len(m.rejected) {
		m.rejected[r].Add(1)
	}
}

// Fallback counts a fallback the library ran for a refused or failed
// call: ok when it returned no error (Totals.FallbackSuccesses), else
// Totals.FallbackFailures.
func (m *Meter) Fallback(ok bool) {
	if ok {
		m.fallbackOK.Add(1)
	} else {
		m.fallbackFailed.Add(1)
	}
}

// Transition delivers a state change to the subscribers: t.Breaker and
// t.Generation are set by the Meter (each transition starts a new
// generation), a zero t.At means now. Call it from the library's
// state-change hook; it does not block (subscribers only queue).
func (m *Meter) Transition(t breaker.Transition) {
	t.Breaker = m.name
	if t.At.IsZero() {
		t.At = m.clock.Now()
	}
	m.mu.Lock()
	m.generation++
	t.Generation = m.generation
	if len(m.observers) > 0 {
		m.pending = append(m.pending, pending{t: t, obs: m.observers})
	}
	m.mu.Unlock()
	m.deliver()
}

// Generation returns the number of transitions so far.
func (m *Meter) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.generation
}

// Subscribe registers fn for every transition from now on and returns a
// function that unsubscribes it, with the contract of
// breaker.Breaker.Subscribe (fn must not block; after cancel returns it
// is not called again unless a call had already begun).
func (m *Meter) Subscribe(fn func(breaker.Transition)) (cancel func()) {
	o := &observer{fn: fn}
	m.mu.Lock()
	m.observers = append(slices.Clip(m.observers), o)
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			o.canceled.Store(true)
			m.mu.Lock()
			if i := slices.Index(m.observers, o); i >= 0 {
				m.observers = slices.Delete(slices.Clone(m.observers), i, i+1)
			}
			m.mu.Unlock()
		})
	}
}

// deliver hands the queued transitions to their observers, one goroutine
// at a time and without holding m.mu, which keeps their order.
func (m *Meter) deliver() {
	m.mu.Lock()
	if m.delivering {
		m.mu.Unlock()
		return
	}
	m.delivering = true
	for len(m.pending) > 0 {
		batch := m.pending
		m.pending = nil
		m.mu.Unlock()
		for _, p := range batch {
			for _, o := range p.obs {
				if !o.canceled.Load() {
					notify(o.fn, p.t)
				}
			}
		}
		m.mu.Lock()
	}
	m.delivering = false
	m.mu.Unlock()
}

// notify calls fn, recovering a panic: a subscriber must not break the
// library's hook that called Transition.
func notify(fn func(breaker.Transition), t breaker.Transition) {
	defer func() { _ = recover() }()
	fn(t)
}

// Snapshot returns the counters in the shape of breaker.Snapshot, with
// Name, Generation, At, Totals, Latency, LatencySum and InFlight set and
// State as given; the adapter fills in what its library knows of the
// rest (Window, thresholds, a forced state).
func (m *Meter) Snapshot(state breaker.State) breaker.Snapshot {
	// Ended calls are read before admitted ones: every call counted as
	// ended is then counted as admitted too.
	lat := make([]uint64, len(m.latency))
	for i := range m.latency {
		lat[i] = m.latency[i].Load()
	}
	t := breaker.Totals{
		Successes: m.successes.Load(), Errors: m.errors.Load(), Timeouts: m.timeouts.Load(),
		Panics: m.panics.Load(), Ignored: m.ignored.Load(),
		RejectedOpen:         m.rejected[RejectedOpen].Load(),
		RejectedHalfOpenFull: m.rejected[RejectedHalfOpenFull].Load(),
		RejectedForcedOpen:   m.rejected[RejectedForcedOpen].Load(),
		RejectedBulkhead:     m.rejected[RejectedBulkhead].Load(),
		FallbackSuccesses:    m.fallbackOK.Load(), FallbackFailures: m.fallbackFailed.Load(),
	}
	t.Failures = t.Errors + t.Timeouts + t.Panics
	sum := m.latencySum.Load()
	inFlight := m.inFlight.Load()
	t.Admitted = m.admitted.Load()
	return breaker.Snapshot{
		Name:       m.name,
		State:      state,
		Generation: m.Generation(),
		At:         m.clock.Now(),
		Totals:     t,
		Latency:    lat,
		LatencySum: time.Duration(sum),
		InFlight:   max(inFlight, 0),
	}
}
