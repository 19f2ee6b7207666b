// Package gobreaker reports sony/gobreaker v2 circuit breakers to cbdash:
// it wraps a CircuitBreaker or a TwoStepCircuitBreaker so that an
// agent.Agent (sdk/agent) can report it with RegisterSource.
//
//	cb := cbgobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{Name: "search", Timeout: 30 * time.Second}, cbgobreaker.Options{})
//	if err := a.RegisterSource(cb); err != nil { ... }
//	body, err := cb.Execute(func() ([]byte, error) { return fetch(ctx) })
//
// (imported as cbgobreaker beside github.com/sony/gobreaker/v2.)
//
// Transitions are pushed from gobreaker's OnStateChange hook (a hook set in
// Settings is still called, after the adapter's), with the cause gobreaker
// implies: closed to open by ReadyToTrip (cause library_rule, with the
// counts ReadyToTrip saw), open to half-open when Timeout passed, half-open
// to open on a failed probe, half-open to closed after MaxRequests
// successes. Counts and latencies come from the wrapper's Execute (or
// Allow): calls made on the underlying breaker directly are not counted,
// though their transitions are reported. Outcomes are judged with the
// breaker's own IsExcluded (ignored) and IsSuccessful.
//
// gobreaker has no way to hold a breaker open or closed, so these breakers
// are declared with holds_unsupported and the agent refuses operator
// commands for them. The dashboard shows gobreaker's own settings.
package gobreaker

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/sony/gobreaker/v2"
)

// Library is the library name declared in the hello.
const Library = "sony/gobreaker v2"

// Options configure the adapter (gobreaker's own configuration stays in
// gobreaker.Settings). The zero value works.
type Options struct {
	// Clock times calls and stamps transitions. nil means the system
	// clock. gobreaker itself always runs on the system clock.
	Clock breaker.Clock
}

// The defaults gobreaker applies to zero settings (see gobreaker.Settings).
const (
	defaultTimeout = 60 * time.Second
)

// core is what both wrappers share: the meter, the settings as
// gobreaker applies them, and what its hooks saw.
type core struct {
	meter       *adapter.Meter
	cfg         protocol.BreakerConfig
	timeout     time.Duration
	isSuccess   func(error) bool
	isExcluded  func(error) bool
	state       func() gobreaker.State
	counts      func() gobreaker.Counts
	userOnState func(name string, from, to gobreaker.State)

	// Set by gobreaker's hooks, which it calls under its own lock.
	mu       sync.Mutex
	tripped  gobreaker.Counts // what ReadyToTrip saw when it said yes
	openedAt time.Time
}

// newCore returns the core for st and st with the adapter's hooks.
func newCore(st gobreaker.Settings, o Options) (*core, gobreaker.Settings) {
	c := &core{meter: adapter.NewMeter(st.Name, o.Clock), isSuccess: st.IsSuccessful, isExcluded: st.IsExcluded,
		userOnState: st.OnStateChange, timeout: st.Timeout}
	if c.isSuccess == nil {
		c.isSuccess = func(err error) bool { return err == nil }
	}
	if c.isExcluded == nil {
		c.isExcluded = func(error) bool { return false }
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	c.cfg = describe(st, c.timeout)
	ready := st.ReadyToTrip
	if ready == nil {
		ready = func(n gobreaker.Counts) bool { return n.ConsecutiveFailures > 5 }
	}
	st.ReadyToTrip = func(n gobreaker.Counts) bool {
		trip := ready(n)
		if trip {
			c.mu.Lock()
			c.tripped = n
			c.mu.Unlock()
		}
		return trip
	}
	st.OnStateChange = c.onStateChange
	return c, st
}

// describe gives gobreaker's settings, with the defaults it applies.
func describe(st gobreaker.Settings, timeout time.Duration) protocol.BreakerConfig {
	maxRequests := max(st.MaxRequests, 1)
	custom := func(set bool, def string) string {
		if set {
			return "custom"
		}
		return def
	}
	interval, bucket := st.Interval, st.BucketPeriod
	if interval <= 0 {
		interval, bucket = 0, 0
	} else if bucket <= 0 {
		bucket = 0
	}
	return protocol.BreakerConfig{
		Name:                     st.Name,
		OpenDurationMillis:       timeout.Milliseconds(),
		HalfOpenMaxCalls:         int(maxRequests),
		HalfOpenSuccessThreshold: int(maxRequests),
		Library:                  Library,
		Settings: protocol.NewSettings(map[string]string{
			"MaxRequests":  strconv.FormatUint(uint64(maxRequests), 10),
			"Interval":     interval.String(),
			"BucketPeriod": bucket.String(),
			"Timeout":      timeout.String(),
			"ReadyToTrip":  custom(st.ReadyToTrip != nil, "ConsecutiveFailures > 5"),
			"IsSuccessful": custom(st.IsSuccessful != nil, "err == nil"),
			"IsExcluded":   custom(st.IsExcluded != nil, "none"),
		}),
	}
}

// onStateChange is gobreaker's OnStateChange hook. gobreaker calls it
// under its own lock: it must not call the breaker (the meter only queues
// the transition for the agent).
func (c *core) onStateChange(name string, from, to gobreaker.State) {
	now := c.meter.Now()
	t := breaker.Transition{From: state(from), To: state(to), At: now}
	c.mu.Lock()
	switch {
	case to == gobreaker.StateOpen:
		t.OpenDuration = c.timeout
		if from == gobreaker.StateHalfOpen {
			t.Cause = breaker.Cause{Kind: breaker.CauseProbeFailed, ProbeOutcome: "error"}
		} else {
			n := c.tripped
			t.Cause = breaker.Cause{Kind: breaker.CauseKind(protocol.CauseLibraryRule), Window: window(n)}
			t.Cause.FailureRate = t.Cause.Window.FailureRate
		}
		c.openedAt = now
	case from == gobreaker.StateOpen && to == gobreaker.StateHalfOpen:
		t.Cause = breaker.Cause{Kind: breaker.CauseOpenElapsed}
		// gobreaker notices lazily: the change was due when Timeout passed.
		if due := c.openedAt.Add(c.timeout); !c.openedAt.IsZero() && due.Before(now) {
			t.At = due
		}
	case to == gobreaker.StateClosed:
		t.Cause = breaker.Cause{Kind: breaker.CauseProbesSucceeded}
	default:
		t.Cause = breaker.Cause{Kind: breaker.CauseKind(protocol.CauseLibraryRule)}
	}
	c.mu.Unlock()
	c.meter.Transition(t)
	if c.userOnState != nil {
		c.userOnState(name, from, to)
	}
}

func window(n gobreaker.Counts) breaker.WindowStats {
	w := breaker.WindowStats{Calls: int64(n.Requests - min(n.TotalExclusions, n.Requests)), Failures: int64(n.TotalFailures)}
	if w.Calls > 0 {
		w.FailureRate = float64(w.Failures) * 100 / float64(w.Calls)
	}
	return w
}

func state(s gobreaker.State) breaker.State {
	switch s {
	case gobreaker.StateOpen:
		return breaker.Open
	case gobreaker.StateHalfOpen:
		return breaker.HalfOpen
	}
	return breaker.Closed
}

// Describe returns the breaker's configuration for the hello: gobreaker's
// settings by their names, with the defaults gobreaker applies.
func (c *core) Describe() protocol.BreakerConfig { return c.cfg }

// Snapshot returns the breaker's state, gobreaker's current counts as
// the window, and the adapter's cumulative counters.
func (c *core) Snapshot() breaker.Snapshot {
	s := c.meter.Snapshot(state(c.state()))
	if s.State == breaker.Closed {
		s.Window = window(c.counts())
	}
	return s
}

// Subscribe registers fn for every transition (see agent.Source).
func (c *core) Subscribe(fn func(breaker.Transition)) (cancel func()) { return c.meter.Subscribe(fn) }

// reject counts a call gobreaker refused with err; it reports whether err
// was a refusal.
func (c *core) reject(err error) bool {
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		c.meter.Reject(adapter.RejectedOpen)
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		c.meter.Reject(adapter.RejectedHalfOpenFull)
	default:
		return false
	}
	return true
}

// outcome judges err as gobreaker does.
func (c *core) outcome(err error) breaker.Outcome {
	switch {
	case c.isExcluded(err):
		return breaker.Ignored
	case c.isSuccess(err):
		return breaker.Success
	}
	return breaker.Failure
}

// CircuitBreaker is a gobreaker CircuitBreaker whose calls through
// Execute are counted for cbdash. It is an agent.Source; it is safe for
// concurrent use.
type CircuitBreaker[T any] struct {
	*core
	cb *gobreaker.CircuitBreaker[T]
}

// NewCircuitBreaker returns a gobreaker CircuitBreaker made from st and
// its wrapper. st.Name names the breaker on the dashboard (it must not be
// empty to be registered).
func NewCircuitBreaker[T any](st gobreaker.Settings, o Options) *CircuitBreaker[T] {
	c, st := newCore(st, o)
	cb := gobreaker.NewCircuitBreaker[T](st)
	c.state, c.counts = cb.State, cb.Counts
	return &CircuitBreaker[T]{core: c, cb: cb}
}

// Execute runs req through the breaker as gobreaker's Execute does
// (returning gobreaker.ErrOpenState or gobreaker.ErrTooManyRequests when it
// refuses; a panic is passed on), counting the call.
func (b *CircuitBreaker[T]) Execute(req func() (T, error)) (T, error) {
	ran := false
	res, err := b.cb.Execute(func() (T, error) {
		ran = true
		return measure(b.core, req)
	})
	if !ran {
		b.reject(err)
	}
	return res, err
}

// measure runs req, counting how it ended (a panic is counted and passed
// on).
func measure[T any](c *core, req func() (T, error)) (T, error) {
	start := c.meter.Begin()
	ended := false
	defer func() {
		if !ended {
			c.meter.End(start, breaker.Panic)
		}
	}()
	res, err := req()
	ended = true
	c.meter.End(start, c.outcome(err))
	return res, err
}

// Breaker returns the underlying gobreaker CircuitBreaker (calls made on
// it directly are not counted).
func (b *CircuitBreaker[T]) Breaker() *gobreaker.CircuitBreaker[T] { return b.cb }

// TwoStepCircuitBreaker is a gobreaker TwoStepCircuitBreaker whose calls
// through Allow are counted for cbdash. It is an agent.Source; it is safe
// for concurrent use.
type TwoStepCircuitBreaker[T any] struct {
	*core
	cb *gobreaker.TwoStepCircuitBreaker[T]
}

// NewTwoStepCircuitBreaker returns a gobreaker TwoStepCircuitBreaker made
// from st and its wrapper.
func NewTwoStepCircuitBreaker[T any](st gobreaker.Settings, o Options) *TwoStepCircuitBreaker[T] {
	c, st := newCore(st, o)
	cb := gobreaker.NewTwoStepCircuitBreaker[T](st)
	c.state, c.counts = cb.State, cb.Counts
	return &TwoStepCircuitBreaker[T]{core: c, cb: cb}
}

// Allow asks the breaker to admit a call, as gobreaker's Allow does:
// on admission, done must be called with the call's error (only its
// first call counts); the call's latency runs from Allow to done.
func (b *TwoStepCircuitBreaker[T]) Allow() (done func(err error), err error) {
	gdone, err := b.cb.Allow()
	if err != nil {
		b.reject(err)
		return nil, err
	}
	start := b.meter.Begin()
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			b.meter.End(start, b.outcome(err))
			gdone(err)
		})
	}, nil
}

// Breaker returns the underlying gobreaker TwoStepCircuitBreaker.
func (b *TwoStepCircuitBreaker[T]) Breaker() *gobreaker.TwoStepCircuitBreaker[T] { return b.cb }
