package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// TransportConfig configures a Transport. The zero value works: one
// breaker per host, each with the zero Config.
type TransportConfig struct {
	// Config is the configuration of every breaker the transport makes.
	Config Config
	// BreakerFor names the breaker for a request; requests with the same
	// name share a breaker. nil means the request's host (URL.Host, with
	// its port), as Hystrix and resilience4j users usually key breakers.
	// Return a constant such as "payments" to name the breaker of a
	// dependency.
	BreakerFor func(*http.Request) string
	// OnNew is called once with each breaker the transport makes, before
	// its first call (for example to register it with an agent). It must
	// not call back into the Transport.
	OnNew func(*Breaker)
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
// made on first use and kept for the Transport's life, one per name, so
// BreakerFor should map requests to a bounded set of names. It is safe
// for concurrent use.
type Transport struct {
	base http.RoundTripper
	cfg  TransportConfig

	mu       sync.Mutex
	breakers map[string]*Breaker
	order    []*Breaker
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
// means http.DefaultTransport). An invalid cfg.Config is reported by every
// RoundTrip (as an error wrapping ErrInvalidConfig), so that a
// misconfiguration fails loudly instead of silently bypassing the breaker.
func NewTransport(base http.RoundTripper, cfg TransportConfig) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, cfg: cfg, breakers: make(map[string]*Breaker)}
	if _, err := cfg.Config.withDefaults(); err != nil {
		t.err = err
	}
	return t
}

// Breaker returns the breaker named name, making it if needed.
func (t *Transport) Breaker(name string) (*Breaker, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	if b, ok := t.breakers[name]; ok {
		return b, nil
	}
	b, err := New(name, t.cfg.Config)
	if err != nil {
		return nil, err
	}
	t.breakers[name] = b
	t.order = append(t.order, b)
	if t.cfg.OnNew != nil {
		t.cfg.OnNew(b)
	}
	return b, nil
}

// Breakers returns the breakers made so far, in the order they were made.
func (t *Transport) Breakers() []*Breaker {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Breaker(nil), t.order...)
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
	b, err := t.Breaker(name)
	if err != nil {
		closeBody(req)
		return nil, err
	}
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
