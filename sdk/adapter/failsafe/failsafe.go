// Package failsafe reports failsafe-go circuit breakers to cbdash and
// applies the dashboard's holds to them: it builds a failsafe-go
// CircuitBreaker from its Builder and wraps it so that an agent.Agent
// (sdk/agent) can report it with RegisterSource.
//
//	cb := cbfailsafe.New("payments", circuitbreaker.NewBuilder[any]().WithFailureThresholdRatio(5, 10).WithDelay(30*time.Second), cbfailsafe.Options{})
//	if err := a.RegisterSource(cb); err != nil { ... }
//	v, err := cb.Get(ctx, func(ctx context.Context) (any, error) { return pay(ctx) })
//
// (imported as cbfailsafe beside github.com/failsafe-go/failsafe-go.)
//
// Transitions are pushed from failsafe-go's state-changed listener, which
// New sets on the builder (replacing one set before: pass it as
// Options.OnStateChanged instead), with failsafe-go's figures: closed to
// open with its failure rate and counts (cause failure_rate), open to
// half-open after the delay, half-open to open or closed by the probes.
// Counts and latencies come from the wrapper's Get and Run: calls through
// the underlying breaker directly are not counted, though their
// transitions are reported. Outcomes are judged by the breaker's own
// failure conditions (HandleErrors, HandleResult...).
//
// Holds: force_open rejects every call through the wrapper (with an error
// wrapping circuitbreaker.ErrOpen) and opens the failsafe-go breaker;
// force_closed runs every call without the breaker judging it (the
// failsafe-go breaker is closed and sees none of them); release and reset
// close the breaker. While a hold lasts, failsafe-go's own transitions are
// not reported (the hold is the state); a hold's TTL ends it at the first
// call or report after it runs out (cause expired).
//
// failsafe-go does not expose a built breaker's settings: New reads them
// from the builder by reflection, read-only, and leaves out any it cannot
// find, so a failsafe-go release that renames them shows fewer settings
// rather than failing (the tests pin the names for the version in go.mod).
package failsafe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// Library is the library name declared in the hello.
const Library = "failsafe-go"

// ErrHeldOpen is returned (wrapping circuitbreaker.ErrOpen) for a call
// refused because an operator holds the breaker open.
var ErrHeldOpen = fmt.Errorf("%w: held open by an operator", circuitbreaker.ErrOpen)

// Options configure the adapter. The zero value works.
type Options struct {
	// Clock times calls, stamps transitions and runs holds' TTLs. nil
	// means the system clock. failsafe-go itself runs on the system clock.
	Clock breaker.Clock
	// OnStateChanged, if set, is called after the adapter's own listener
	// for every state change of the failsafe-go breaker.
	OnStateChanged func(circuitbreaker.StateChangedEvent)
}

// CircuitBreaker is a failsafe-go circuit breaker whose calls through Get
// and Run are counted for cbdash and which obeys operator holds. It is an
// agent.Source and an agent.Commander; it is safe for concurrent use.
type CircuitBreaker[R any] struct {
	cb        circuitbreaker.CircuitBreaker[R]
	meter     *adapter.Meter
	cfg       protocol.BreakerConfig
	threshold float64 // percent, for the trip cause
	isFailure func(R, error) bool
	user      func(circuitbreaker.StateChangedEvent)

	mu       sync.Mutex
	hold     *hold // nil: not held
	applying int   // > 0 while the adapter itself opens or closes cb
}

type hold struct {
	state breaker.State // ForcedOpen or ForcedClosed
	cmd   breaker.Command
	until time.Time // zero: until released
}

// New builds b into a failsafe-go circuit breaker called name and wraps
// it. It sets b's state-changed listener (see the package doc).
func New[R any](name string, b circuitbreaker.Builder[R], o Options) *CircuitBreaker[R] {
	c := &CircuitBreaker[R]{meter: adapter.NewMeter(name, o.Clock), user: o.OnStateChanged}
	b.OnStateChanged(c.onStateChanged)
	c.cb = b.Build()
	c.cfg, c.threshold = describe(name, c.cb)
	if f, ok := c.cb.(interface{ IsFailure(R, error) bool }); ok {
		c.isFailure = f.IsFailure
	} else {
		c.isFailure = func(_ R, err error) bool { return err != nil }
	}
	return c
}

// Breaker returns the failsafe-go circuit breaker, for composing it with
// other policies (calls that do not go through Get or Run are not counted).
func (c *CircuitBreaker[R]) Breaker() circuitbreaker.CircuitBreaker[R] { return c.cb }

// Get runs fn through the breaker (failsafe.With(breaker)), counting the
// call, and returns its result; a refused call returns an error wrapping
// circuitbreaker.ErrOpen (ErrHeldOpen while an operator holds it open).
func (c *CircuitBreaker[R]) Get(ctx context.Context, fn func(context.Context) (R, error)) (R, error) {
	switch c.held(c.meter.Now()) {
	case breaker.ForcedOpen:
		c.meter.Reject(adapter.RejectedForcedOpen)
		var zero R
		return zero, ErrHeldOpen
	case breaker.ForcedClosed:
		return c.measure(ctx, fn)
	}
	ran := false
	res, err := failsafe.With[R](c.cb).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[R]) (R, error) {
		ran = true
		return c.measure(exec.Context(), fn)
	})
	if !ran && errors.Is(err, circuitbreaker.ErrOpen) {
		c.meter.Reject(adapter.RejectedOpen) // failsafe-go says open for a full half-open too
	}
	return res, err
}

// Run is Get for a call without a result.
func (c *CircuitBreaker[R]) Run(ctx context.Context, fn func(context.Context) error) error {
	_, err := c.Get(ctx, func(ctx context.Context) (R, error) {
		var zero R
		return zero, fn(ctx)
	})
	return err
}

func (c *CircuitBreaker[R]) measure(ctx context.Context, fn func(context.Context) (R, error)) (R, error) {
	start := c.meter.Begin()
	ended := false
	defer func() {
		if !ended {
			c.meter.End(start, breaker.Panic)
		}
	}()
	res, err := fn(ctx)
	ended = true
	o := breaker.Success
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		o = breaker.Canceled
	case c.isFailure(res, err):
		o = breaker.Failure
	}
	c.meter.End(start, o)
	return res, err
}

// onStateChanged is failsafe-go's state-changed listener (called outside
// its lock).
func (c *CircuitBreaker[R]) onStateChanged(e circuitbreaker.StateChangedEvent) {
	c.mu.Lock()
	held := c.hold != nil || c.applying > 0
	c.mu.Unlock()
	if !held {
		t := breaker.Transition{From: state(e.OldState), To: state(e.NewState)}
		m := e.Metrics()
		switch {
		case e.NewState == circuitbreaker.OpenState && e.OldState == circuitbreaker.HalfOpenState:
			t.Cause = breaker.Cause{Kind: breaker.CauseProbeFailed, ProbeOutcome: "error"}
		case e.NewState == circuitbreaker.OpenState:
			t.Cause = breaker.Cause{Kind: breaker.CauseFailureRate, FailureRate: m.FailureRate() * 100, Threshold: c.threshold,
				Window: breaker.WindowStats{Calls: int64(m.Executions()), Failures: int64(m.Failures()), FailureRate: m.FailureRate() * 100}}
		case e.NewState == circuitbreaker.HalfOpenState:
			t.Cause = breaker.Cause{Kind: breaker.CauseOpenElapsed}
		case e.OldState == circuitbreaker.HalfOpenState:
			t.Cause = breaker.Cause{Kind: breaker.CauseProbesSucceeded}
		default:
			t.Cause = breaker.Cause{Kind: breaker.CauseKind(protocol.CauseLibraryRule)}
		}
		if e.NewState == circuitbreaker.OpenState {
			t.OpenDuration = c.cb.RemainingDelay()
		}
		c.meter.Transition(t)
	}
	if c.user != nil {
		c.user(e)
	}
}

func state(s circuitbreaker.State) breaker.State {
	switch s {
	case circuitbreaker.OpenState:
		return breaker.Open
	case circuitbreaker.HalfOpenState:
		return breaker.HalfOpen
	}
	return breaker.Closed
}

// held returns the hold's state at now (Closed when not held), ending a
// hold whose TTL ran out.
func (c *CircuitBreaker[R]) held(now time.Time) breaker.State {
	c.mu.Lock()
	h := c.hold
	if h == nil {
		c.mu.Unlock()
		return breaker.Closed
	}
	if h.until.IsZero() || now.Before(h.until) {
		c.mu.Unlock()
		return h.state
	}
	c.hold = nil
	c.applying++
	c.mu.Unlock()
	c.cb.Close()
	c.doneApplying()
	cmd := h.cmd
	c.meter.Transition(breaker.Transition{From: h.state, To: breaker.Closed, At: h.until,
		Cause: breaker.Cause{Kind: breaker.CauseExpired, Command: &cmd}})
	return breaker.Closed
}

// Describe returns the breaker's configuration for the hello: failsafe-go's
// settings by their builder names, and their protocol equivalents.
func (c *CircuitBreaker[R]) Describe() protocol.BreakerConfig { return c.cfg }

// Snapshot returns the breaker's state (a hold's, if held), failsafe-go's
// current counts as the window, and the adapter's cumulative counters.
func (c *CircuitBreaker[R]) Snapshot() breaker.Snapshot {
	now := c.meter.Now()
	st := c.held(now)
	c.mu.Lock()
	h := c.hold
	c.mu.Unlock()
	if h == nil {
		st = state(c.cb.State())
	}
	s := c.meter.Snapshot(st)
	s.FailureRateThreshold = c.threshold
	s.MinimumCalls = c.cfg.MinimumCalls
	if h != nil {
		s.ForcedUntil = h.until
		cmd := h.cmd
		s.Forced = &cmd
	} else if st == breaker.Closed {
		m := c.cb.Metrics()
		s.Window = breaker.WindowStats{Calls: int64(m.Executions()), Failures: int64(m.Failures()), FailureRate: m.FailureRate() * 100}
	}
	return s
}

// Subscribe registers fn for every transition (see agent.Source).
func (c *CircuitBreaker[R]) Subscribe(fn func(breaker.Transition)) (cancel func()) {
	return c.meter.Subscribe(fn)
}

// Apply carries out an operator command (see the package doc for what a
// hold means here) and returns the state it leaves the breaker in, with
// the contract of breaker.Breaker.Apply: repeating a force command
// replaces its expiry and command without a transition; release and reset
// from closed make none. An unknown action or a negative TTL returns an
// error wrapping breaker.ErrInvalidCommand and changes nothing.
func (c *CircuitBreaker[R]) Apply(cmd breaker.Command) (breaker.State, error) {
	now := c.meter.Now()
	from := c.held(now)
	switch cmd.Action {
	case breaker.ActionForceOpen, breaker.ActionForceClosed, breaker.ActionRelease, breaker.ActionReset:
	default:
		return from, fmt.Errorf("%w: unknown action %q", breaker.ErrInvalidCommand, cmd.Action)
	}
	if cmd.TTL < 0 {
		return from, fmt.Errorf("%w: TTL is negative (%v)", breaker.ErrInvalidCommand, cmd.TTL)
	}
	c.mu.Lock()
	if c.hold == nil {
		from = state(c.cb.State())
	}
	to := breaker.Closed
	switch cmd.Action {
	case breaker.ActionForceOpen:
		to = breaker.ForcedOpen
	case breaker.ActionForceClosed:
		to = breaker.ForcedClosed
	}
	var t *breaker.Transition
	if to == breaker.Closed {
		c.hold = nil
	} else {
		h := &hold{state: to, cmd: cmd}
		if cmd.TTL > 0 {
			h.until = now.Add(cmd.TTL)
		}
		c.hold = h
		t = &breaker.Transition{Cause: breaker.Cause{ExpiresAt: h.until}}
	}
	c.applying++
	c.mu.Unlock()
	// failsafe-go's own transitions here are not reported: the command's
	// transition stands for them.
	if to == breaker.ForcedOpen {
		c.cb.Open()
	} else {
		c.cb.Close()
	}
	c.doneApplying()
	if from != to {
		if t == nil {
			t = &breaker.Transition{}
		}
		t.From, t.To, t.At = from, to, now
		t.Cause.Kind, t.Cause.Command = breaker.CauseCommand, &cmd
		c.meter.Transition(*t)
	}
	return to, nil
}

func (c *CircuitBreaker[R]) doneApplying() {
	c.mu.Lock()
	c.applying--
	c.mu.Unlock()
}
