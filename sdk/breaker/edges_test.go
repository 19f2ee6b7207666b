package breaker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// errBug is the error a buggy Classify hook panics on.
var errBug = errors.New("the error the classifier cannot handle")

// panickyClassify is a Classify hook with a bug: it panics on errBug.
func panickyClassify(err error) breaker.Outcome {
	if errors.Is(err, errBug) {
		panic("classifier bug")
	}
	return breaker.DefaultClassify(err)
}

// mustPanic runs fn and fails unless it panics with want.
func mustPanic(t *testing.T, want any, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if r := recover(); r != want {
			t.Errorf("recovered %v, want the panic %v to reach the caller", r, want)
		}
	}()
	fn()
}

func TestAPanickingClassifyIsRecordedAndFreesTheProbe(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		timeout time.Duration
		probe   func(*breaker.Breaker) // makes the call whose outcome Classify panics on
	}{
		{"Execute", 0, func(b *breaker.Breaker) {
			_ = b.Execute(ctx, func(context.Context) error { return errBug })
		}},
		{"Execute with a call timeout", time.Second, func(b *breaker.Breaker) {
			_ = b.Execute(ctx, func(context.Context) error { return errBug })
		}},
		{"Do", 0, func(b *breaker.Breaker) {
			_, _ = breaker.Do(ctx, b, func(context.Context) (int, error) { return 0, errBug })
		}},
		{"ExecuteWithFallback", 0, func(b *breaker.Breaker) {
			_ = b.ExecuteWithFallback(ctx, func(context.Context) error { return errBug },
				func(context.Context, error) error { return nil })
		}},
		{"Allow and Done", 0, func(b *breaker.Breaker) {
			c, err := b.Allow()
			if err != nil {
				t.Fatalf("the probe was rejected: %v", err)
			}
			c.Done(errBug)
		}},
		{"Allow and Done with a call timeout", time.Second, func(b *breaker.Breaker) {
			c, err := b.Allow()
			if err != nil {
				t.Fatalf("the probe was rejected: %v", err)
			}
			c.Done(errBug)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small
			cfg.HalfOpenMaxCalls = 1
			cfg.MaxConcurrent = 1
			cfg.CallTimeout = tc.timeout
			cfg.Classify = panickyClassify
			f := newFixture(t, cfg)
			f.trip(t)
			f.clk.Advance(time.Second) // half-open: one probe slot

			mustPanic(t, "classifier bug", func() { tc.probe(f.b) })
			s := f.b.Snapshot()
			if s.InFlight != 0 || s.Totals.Panics != 1 || s.Totals.Admitted != 5 {
				t.Fatalf("after the panic: in flight %d, totals %+v; want the probe ended as a panic", s.InFlight, s.Totals)
			}
			tr := f.transitions()
			if last := tr[len(tr)-1]; s.State != breaker.Open || last.Cause.Kind != breaker.CauseProbeFailed || last.Cause.ProbeOutcome != "panic" {
				t.Fatalf("state %v after %+v; want the failed probe to reopen the breaker", s.State, last)
			}

			f.clk.Advance(time.Second) // half-open again
			c, err := f.b.Allow()
			if err != nil {
				t.Fatalf("the next call after the open duration = %v, want it admitted as the probe", err)
			}
			c.Done(nil)
			if s := f.b.Snapshot(); s.State != breaker.Closed || s.InFlight != 0 {
				t.Fatalf("after a good probe: state %v, in flight %d; want closed, 0", s.State, s.InFlight)
			}
		})
	}
}

func TestAPanickingTransportClassifyIsRecordedAndFreesTheProbe(t *testing.T) {
	srv := statusServer(t)
	clk := breakertest.NewEpochClock()
	cfg := small
	cfg.Clock = clk
	cfg.MaxConcurrent = 1
	tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{
		Config: cfg,
		Classify: func(r *http.Response) breaker.Outcome {
			switch r.StatusCode {
			case http.StatusTeapot:
				panic("classifier bug")
			case http.StatusInternalServerError:
				return breaker.Failure
			}
			return breaker.Success
		},
	})
	roundTrip := func(status string) (*http.Response, error) {
		resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, srv.URL+"/?s="+status, nil))
		if err == nil {
			t.Cleanup(func() { resp.Body.Close() })
		}
		return resp, err
	}
	for range 4 {
		if _, err := roundTrip("500"); err != nil {
			t.Fatal(err)
		}
	}
	b := tr.Breakers()[0]
	if b.State() != breaker.Open {
		t.Fatalf("state %v after four 500s, want open", b.State())
	}
	clk.Advance(time.Second)
	mustPanic(t, "classifier bug", func() { _, _ = roundTrip("418") })
	if s := b.Snapshot(); s.InFlight != 0 || s.Totals.Panics != 1 || s.State != breaker.Open {
		t.Fatalf("after the panic: state %v, in flight %d, totals %+v", s.State, s.InFlight, s.Totals)
	}
	clk.Advance(time.Second)
	if _, err := roundTrip("200"); err != nil {
		t.Fatalf("the request after the open duration = %v, want it admitted as the probe", err)
	}
	if s := b.Snapshot(); s.State != breaker.Closed || s.InFlight != 0 {
		t.Fatalf("after a good probe: state %v, in flight %d", s.State, s.InFlight)
	}
}
