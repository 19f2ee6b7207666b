package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one admitted call in the two-step form (Allow, then Done or
// Report), for middleware that cannot wrap the call in a function. End
// every admitted call exactly once: a call never ended holds its bulkhead
// and probe slots for good (unless CallTimeout ends it). Ending it again,
// through the same Call or a copy, is a no-op counted in Totals.Misuse
// (it would otherwise free a slot another call holds and count one call
// twice). The zero Call (returned with a rejection) ignores Done and
// Report. A Call may be ended from any goroutine.
type Call struct {
	b      *Breaker
	ep     *epoch
	start  int64
	probe  bool
	stripe uint8
	t      *timedCall
	tk     *ticket // set by Allow: makes the first end the only one
	tkGen  uint64  // tk.gen when the call was admitted
}

// ticket tells the first end of a two-step call from later ones, whatever
// copies of the Call exist. Tickets are pooled, so Allow allocates
// nothing: each end moves gen on, so a stale copy of an ended Call never
// matches the ticket again, even after another call has reused it.
type ticket struct{ gen atomic.Uint64 }

var tickets = sync.Pool{New: func() any { return new(ticket) }}

// claim reports whether this is the first end of c; a later end is
// counted as misuse.
func (c *Call) claim() bool {
	if c.tk == nil {
		return true
	}
	if !c.tk.gen.CompareAndSwap(c.tkGen, c.tkGen+1) {
		c.b.ctr.add(stripeHint(), cMisuse)
		return false
	}
	tickets.Put(c.tk)
	return true
}

// Done ends the call with the outcome Config.Classify gives err. If
// Classify panics, the call is recorded as a Panic (a failure, which frees
// its bulkhead and probe slots) and the panic goes on to the caller, as
// it does for a panicking call in Execute. A second Done or Report of the
// same call does nothing but count in Totals.Misuse (Classify does not
// run).
func (c Call) Done(err error) {
	if c.b == nil || !c.claim() {
		return
	}
	ended := false
	defer func() {
		if !ended { // Classify panicked
			c.report(Panic)
		}
	}()
	o := c.b.cfg.Classify(err)
	ended = true
	c.report(o)
}

// Report ends the call with outcome o. An outcome outside the Outcome
// constants counts as Failure. Like Done, it does nothing but count in
// Totals.Misuse when the call has already been ended.
func (c Call) Report(o Outcome) {
	if c.b != nil && c.claim() {
		c.report(o)
	}
}

// Started returns when the call was admitted, by the breaker's clock.
func (c Call) Started() time.Time {
	if c.b == nil {
		return time.Time{}
	}
	return c.b.wall(c.start)
}

// report ends the call, unless its timeout has already ended it; it
// reports whether this result was the one recorded.
func (c *Call) report(o Outcome) bool {
	if o > Canceled {
		o = Failure
	}
	b := c.b
	now := b.now()
	if t := c.t; t != nil {
		if !t.done.CompareAndSwap(false, true) {
			return false // the timeout ended it
		}
		b.tq.remove(t)
		if now >= t.deadline { // past its deadline, whether or not the timer has fired yet
			b.timeOut(t)
			return false
		}
	}
	b.finish(c, o, now)
	return true
}

// Allow asks to start a call: it returns a Call to end with Done or Report
// once the call is over, or a rejection error (ErrOpen, ErrHalfOpenFull,
// ErrForcedOpen, ErrBulkheadFull or ErrRamp, all matching ErrRejected). With
// CallTimeout set, a call not ended within it is recorded as a Timeout at
// its deadline and its later Done is thrown away; the caller is not
// interrupted (use Execute for that).
func (b *Breaker) Allow() (Call, error) {
	c, err := b.admit()
	if err != nil {
		return c, err
	}
	c.tk = tickets.Get().(*ticket)
	c.tkGen = c.tk.gen.Load()
	if b.timeoutNs > 0 {
		armed := false
		defer func() {
			if !armed { // the Clock panicked: the call ends, freeing its slots, and the panic goes on
				c.report(Panic)
			}
		}()
		b.arm(&c, nil)
		armed = true
	}
	return c, nil
}

// Execute runs fn through the breaker. A rejected call does not run and
// Execute returns the rejection (errors.Is(err, ErrRejected)). Otherwise
// it returns fn's error after recording the call's outcome:
//
//   - if ctx is done when fn returns an error, the caller gave up:
//     Canceled, not a failure, whatever the error;
//   - otherwise Config.Classify(err) decides (DefaultClassify by default);
//   - if fn panics, or Classify does, the call is recorded as Panic (a
//     failure) and the panic goes on;
//   - with CallTimeout set, fn's context is canceled at the deadline with
//     cause ErrTimeout, the call is recorded as a Timeout at that moment,
//     and Execute returns ErrTimeout when fn returns, discarding fn's
//     late result.
//
// fn runs on the calling goroutine. Execute is safe for concurrent use.
func (b *Breaker) Execute(ctx context.Context, fn func(context.Context) error) error {
	_, _, err := b.execute(ctx, fn)
	return err
}

// execute runs fn and returns its outcome, whether the call was
// rejected, and the error for the caller.
func (b *Breaker) execute(ctx context.Context, fn func(context.Context) error) (Outcome, bool, error) {
	if b.plain {
		if ep := b.ep.Load(); ep.state == Closed {
			return b.executeClosed(ctx, ep, fn)
		}
	}
	call, err := b.admit()
	if err != nil {
		return 0, true, err
	}
	if b.timeoutNs > 0 {
		return b.executeTimed(ctx, call, fn)
	}
	ended := false
	defer func() {
		if !ended { // fn or Classify panicked
			call.report(Panic)
		}
	}()
	err = fn(ctx)
	o := b.outcome(ctx, err)
	ended = true
	call.report(o)
	return o, false, err
}

// executeClosed is execute for a call through the closed epoch ep of a
// breaker without a CallTimeout or a bulkhead (b.plain): the common case,
// kept short. A closed epoch has no lazy transition due and admits every
// call unless it ramps (one atomic load tells, when Config.RampDuration is
// set; while ramping, the ramp's credit takes one atomic add), so
// admission is only the start time and the Admitted count. On a
// hot breaker (see coarseClock) whose decisions never depend on a call's
// duration (b.coarseOK), a successful call takes its start and end from
// the coarse clock; any other outcome reads the precise clock at its end,
// so that a trip's time is exact.
func (b *Breaker) executeClosed(ctx context.Context, ep *epoch, fn func(context.Context) error) (Outcome, bool, error) {
	c := Call{b: b, ep: ep, stripe: stripeHint()}
	ramping := ep.ramp != nil && ep.ramp.active.Load() // nil unless Config.RampDuration is set
	hot := false
	if b.coarseOK && !ramping { // a ramp's decision reads the precise clock
		if t := coarse.now.Load(); t != 0 {
			c.start, hot = t-b.coarseOff, true
		}
	}
	if !hot {
		c.start = b.now()
	}
	if ramping && !ep.ramp.admit(c.start) {
		b.ctr.add(c.stripe, cRejRamp)
		return 0, true, ErrRamp
	}
	if n := b.ctr.s[c.stripe%numStripes].n[cAdmitted].Add(1); n%hotCalls == 0 && b.coarseOK {
		b.checkHot(c.stripe, c.start)
	}
	ended := false
	defer func() {
		if !ended { // fn or Classify panicked
			b.finish(&c, Panic, b.now())
		}
	}()
	err := fn(ctx)
	o := b.outcome(ctx, err)
	ended = true
	var end int64
	if hot && o == Success {
		if t := coarse.now.Load(); t != 0 {
			end = t - b.coarseOff
		} else {
			end = b.now()
		}
	} else {
		end = b.now()
	}
	b.finish(&c, o, end)
	return o, false, err
}

func (b *Breaker) executeTimed(ctx context.Context, call Call, fn func(context.Context) error) (Outcome, bool, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ended := false
	defer func() {
		if !ended { // fn, Classify or the Clock panicked
			call.report(Panic)
		}
	}()
	b.arm(&call, cancel)
	err := fn(cctx)
	o := b.outcome(ctx, err)
	ended = true
	if !call.report(o) {
		return Timeout, false, ErrTimeout
	}
	return o, false, err
}

// outcome classifies the error of a call made with the caller's context
// ctx.
func (b *Breaker) outcome(ctx context.Context, err error) Outcome {
	if err == nil {
		return Success
	}
	if ctx.Err() != nil {
		return Canceled
	}
	return b.cfg.Classify(err)
}

// ExecuteWithFallback is Execute that calls fallback with the error when
// the call is rejected or fails (Failure, Timeout); fallback's error is
// then returned instead. It does not run for ignored errors, cancellation
// or panics. Fallback results are counted in Totals.FallbackSuccesses and
// Totals.FallbackFailures.
func (b *Breaker) ExecuteWithFallback(ctx context.Context, fn func(context.Context) error, fallback func(context.Context, error) error) error {
	o, rejected, err := b.execute(ctx, fn)
	if !rejected && !o.failed() {
		return err
	}
	ferr := fallback(ctx, err)
	b.countFallback(ferr)
	return ferr
}

func (b *Breaker) countFallback(err error) {
	if err == nil {
		b.ctr.add(stripeHint(), cFallbackOK)
	} else {
		b.ctr.add(stripeHint(), cFallbackFailed)
	}
}

// Do runs fn through b like Execute and returns its value. On a
// rejection or a timeout it returns the zero T (a late result is thrown
// away).
func Do[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	v, _, _, err := do(ctx, b, fn)
	return v, err
}

func do[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, Outcome, bool, error) {
	var v T
	o, rejected, err := b.execute(ctx, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	if rejected || (o == Timeout && err == ErrTimeout) {
		var zero T
		return zero, o, rejected, err
	}
	return v, o, rejected, err
}

// DoWithFallback is Do that calls fallback with the error when the call
// is rejected or fails, as ExecuteWithFallback does, and returns the
// fallback's value and error instead.
func DoWithFallback[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error), fallback func(context.Context, error) (T, error)) (T, error) {
	v, o, rejected, err := do(ctx, b, fn)
	if !rejected && !o.failed() {
		return v, err
	}
	fv, ferr := fallback(ctx, err)
	b.countFallback(ferr)
	return fv, ferr
}
