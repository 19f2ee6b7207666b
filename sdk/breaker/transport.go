package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// TransportConfig configures a Transport. The zero value works: one
// breaker per host, each with the zero Config, at most 100 of them, idle
// ones evicted after 10 minutes (see IdleTimeout).
type TransportConfig struct {
	// Config is the configuration of every breaker the transport makes.
	Config Config
	// BreakerFor names the breaker for a request; requests with the same
	// name share a breaker. nil means the request's host (URL.Host, with
	// its port), as Hystrix and resilience4j users usually key breakers.
	// Return a constant such as "payments" to name the breaker of a
	// dependency.
	BreakerFor func(*http.Request) string
	// MaxBreakers bounds how many breakers the Transport keeps, one per
	// name. 0 means 100 (an agent reports at most
	// protocol.MaxBreakersPerHello breakers in all). When a request needs
	// a new breaker and MaxBreakers are kept, the least recently used one
	// that can be evicted (closed, with no call in flight) is evicted to
	// make room; if none can, the request is not sent and RoundTrip
	// returns an error wrapping ErrTooManyBreakers. Negative is invalid.
	MaxBreakers int
	// IdleTimeout evicts a breaker that the Transport has not handed out
	// (to a request, or through Breaker) for this long, if it can be
	// evicted: a breaker that is open, half-open or held by an operator
	// (forced open or closed), or that has a call in flight, is never
	// evicted, whatever its age. The Transport runs no goroutine: it looks
	// for idle breakers on requests, at most every IdleTimeout/8, so an
	// idle breaker goes at the first request from IdleTimeout to
	// IdleTimeout*9/8 after its last use. 0 means 10 minutes. Negative is
	// invalid. An evicted name gets a new breaker (new state, counters
	// from zero) on its next request.
	//
	// Idle breakers are evicted only if the Transport can tell whoever
	// OnNew gave them to: with OnNew set and OnEvict nil, no breaker is
	// evicted for idleness (a rarely used dependency would otherwise come
	// back as a second breaker of its name, which an agent refuses to
	// register). Eviction to stay within MaxBreakers happens regardless.
	IdleTimeout time.Duration
	// OnNew is called once with each breaker the transport makes, before
	// its first call (for example to register it with an agent:
	// agent.Register).
	OnNew func(*Breaker)
	// OnEvict is called once with each breaker the transport evicts,
	// after it is forgotten and before a new breaker of the same name is
	// made (for example to unregister it from an agent:
	// agent.Unregister). Set it whenever OnNew is set (see IdleTimeout).
	//
	// OnNew and OnEvict run with the Transport's lock held, so that they
	// see the breakers of one name in order: they must not call back into
	// the Transport, and they should return quickly (agent.Register and
	// agent.Unregister do).
	OnEvict func(*Breaker)
	// Classify decides a response's outcome. nil means: 5xx is Failure,
	// every other status Success. If it panics, the call is recorded as a
	// Panic, the response body is closed and the panic goes on to the
	// caller of RoundTrip.
	Classify func(*http.Response) Outcome
}

// Transport is an http.RoundTripper that guards each request with a
// breaker: connection errors, timeouts and (by default) 5xx responses are
// failures, every other response a success, and the caller giving up
// (its request context done) is not counted. It never reads the response
// body; the call ends when the response headers arrive. A rejected
// request returns a *RejectedError wrapping the rejection. Breakers are
// made on first use, one per name, and kept within
// TransportConfig.MaxBreakers and IdleTimeout; Stats counts what was
// evicted. It is safe for concurrent use.
type Transport struct {
	base http.RoundTripper
	cfg  TransportConfig
	now  func() time.Time // the breakers' clock

	mu       sync.Mutex
	breakers map[string]*kept
	order    []*kept   // in the order they were made
	swept    time.Time // when idle breakers were last looked for
	uses     uint64    // breakers handed out so far
	stats    TransportStats
	err      error
}

// RejectedError is the error of a request the Transport rejected. It
// matches its rejection (ErrOpen, ...) and ErrRejected under errors.Is.
type RejectedError struct {
	Breaker string // the breaker's name
	Err     error  // the rejection
}

func (e *RejectedError) Error() string { return fmt.Sprintf("%s: %v", e.Breaker, e.Err) }

// Unwrap returns the rejection.
func (e *RejectedError) Unwrap() error { return e.Err }

// NewTransport returns a Transport that sends requests with base (nil
// means http.DefaultTransport). An invalid cfg (its Config, MaxBreakers or
// IdleTimeout) is reported by every RoundTrip (as an error wrapping
// ErrInvalidConfig that names the field), so that a misconfiguration
// fails loudly instead of silently bypassing the breaker.
func NewTransport(base http.RoundTripper, cfg TransportConfig) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, breakers: make(map[string]*kept), now: time.Now}
	if c := cfg.Config.Clock; c != nil {
		t.now = c.Now
	}
	t.cfg, t.err = cfg.withDefaults()
	t.swept = t.now()
	return t
}

func (c TransportConfig) withDefaults() (TransportConfig, error) {
	if _, err := c.Config.withDefaults(); err != nil {
		return c, err
	}
	switch {
	case c.MaxBreakers < 0:
		return c, invalidf("TransportConfig.MaxBreakers must not be negative (got %d)", c.MaxBreakers)
	case c.MaxBreakers == 0:
		c.MaxBreakers = 100
	}
	switch {
	case c.IdleTimeout < 0:
		return c, invalidf("TransportConfig.IdleTimeout must not be negative (got %v)", c.IdleTimeout)
	case c.IdleTimeout == 0:
		c.IdleTimeout = 10 * time.Minute
	}
	return c, nil
}

// RoundTrip sends req through its breaker.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	name := req.URL.Host
	if name == "" {
		name = req.Host
	}
	if t.cfg.BreakerFor != nil {
		name = t.cfg.BreakerFor(req)
	}
	k, err := t.acquire(name)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	defer k.users.Add(-1)
	b := k.b
	call, err := b.admit()
	if err != nil {
		closeBody(req)
		return nil, &RejectedError{Breaker: name, Err: err}
	}
	ctx := req.Context()
	var cancel context.CancelCauseFunc
	if b.timeoutNs > 0 {
		var cctx context.Context
		cctx, cancel = context.WithCancelCause(ctx)
		req = req.WithContext(cctx)
		b.arm(&call, cancel)
	}
	var resp *http.Response
	ended := false
	defer func() {
		if !ended { // the base transport or Classify panicked
			call.report(Panic)
			if resp != nil {
				resp.Body.Close()
			}
			if cancel != nil {
				cancel(nil)
			}
		}
	}()
	resp, err = t.base.RoundTrip(req)
	o := t.outcome(ctx, resp, err)
	ended = true
	if !call.report(o) {
		// The breaker's timeout ended the call first.
		if resp != nil {
			resp.Body.Close()
		}
		cancel(nil)
		return nil, fmt.Errorf("%s: %w", name, ErrTimeout)
	}
	if cancel != nil {
		if err != nil {
			cancel(nil)
		} else {
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		}
	}
	return resp, err
}

func (t *Transport) outcome(ctx context.Context, resp *http.Response, err error) Outcome {
	if err != nil {
		if ctx.Err() != nil {
			return Canceled
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return Timeout
		}
		return Failure
	}
	if t.cfg.Classify != nil {
		return t.cfg.Classify(resp)
	}
	if resp.StatusCode >= 500 {
		return Failure
	}
	return Success
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// cancelBody releases the call's context when the caller closes the
// response body, as net/http's own timeouts do.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
