package breaker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
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

func TestEndingACallTwiceChangesNothingButTheMisuseCount(t *testing.T) {
	t.Run("with a bulkhead of 1, a second Done frees no second slot and counts no second success", func(t *testing.T) {
		cfg := small
		cfg.MaxConcurrent = 1
		f := newFixture(t, cfg)
		c, err := f.b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		c.Done(nil)
		c.Done(nil)
		held, err := f.b.Allow()
		if err != nil {
			t.Fatalf("Allow after the call ended = %v", err)
		}
		if _, err := f.b.Allow(); !errors.Is(err, breaker.ErrBulkheadFull) {
			t.Fatalf("second Allow with one call in flight = %v, want ErrBulkheadFull", err)
		}
		s := f.b.Snapshot()
		if s.Totals.Successes != 1 || s.Totals.Misuse != 1 || s.InFlight != 1 || s.Window.Calls != 1 {
			t.Fatalf("totals %+v, in flight %d, window %+v; want 1 success, 1 misuse, 1 in flight", s.Totals, s.InFlight, s.Window)
		}
		held.Done(nil)
	})
	t.Run("half-open with one probe slot, a second Done neither frees the slot nor counts a second good probe", func(t *testing.T) {
		cfg := small
		cfg.HalfOpenMaxCalls = 1
		cfg.HalfOpenSuccessThreshold = 2
		f := newFixture(t, cfg)
		f.trip(t)
		f.clk.Advance(time.Second)
		probe, err := f.b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		probe.Done(nil)
		probe.Done(nil) // would be the second consecutive success that closes it
		if s := f.b.State(); s != breaker.HalfOpen {
			t.Fatalf("state %v: one probe counted as two", s)
		}
		next, err := f.b.Allow()
		if err != nil {
			t.Fatalf("the second probe = %v, want it admitted", err)
		}
		if _, err := f.b.Allow(); !errors.Is(err, breaker.ErrHalfOpenFull) {
			t.Fatalf("a third call with the probe in flight = %v, want ErrHalfOpenFull", err)
		}
		next.Done(nil)
		s := f.b.Snapshot()
		if s.State != breaker.Closed || s.Totals.Successes != 2 || s.Totals.Misuse != 1 || s.InFlight != 0 {
			t.Fatalf("state %v, totals %+v, in flight %d", s.State, s.Totals, s.InFlight)
		}
	})
	t.Run("a copy of an ended Call is ended too, whichever method ends it", func(t *testing.T) {
		f := newFixture(t, small)
		c, err := f.b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		copied := c
		c.Done(nil)
		copied.Report(breaker.Failure)
		copied.Done(errBoom)
		if tot := f.b.Snapshot().Totals; tot.Successes != 1 || tot.Failures != 0 || tot.Misuse != 2 {
			t.Fatalf("totals %+v; want the first end only, and 2 misuses", tot)
		}
	})
	t.Run("a stale Call does not end the call that reuses its bookkeeping", func(t *testing.T) {
		f := newFixture(t, small)
		for range 100 { // tickets are pooled: some later call gets the stale one's
			stale, err := f.b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			stale.Done(nil)
			fresh, err := f.b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			stale.Done(errBoom)
			fresh.Done(nil)
		}
		if tot := f.b.Snapshot().Totals; tot.Successes != 200 || tot.Failures != 0 || tot.Misuse != 100 {
			t.Fatalf("totals %+v; want 200 successes and 100 misuses", tot)
		}
	})
	t.Run("a Done after the call timeout ended the call is not misuse; a second one is", func(t *testing.T) {
		cfg := small
		cfg.CallTimeout = time.Second
		f := newFixture(t, cfg)
		c, err := f.b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(time.Second)
		c.Done(nil)
		if tot := f.b.Snapshot().Totals; tot.Timeouts != 1 || tot.Successes != 0 || tot.Misuse != 0 {
			t.Fatalf("totals %+v; want the timeout, the late Done thrown away", tot)
		}
		c.Done(nil)
		if tot := f.b.Snapshot().Totals; tot.Misuse != 1 {
			t.Fatalf("totals %+v; want the second Done counted as misuse", tot)
		}
	})
	t.Run("concurrent ends of copies record the call once", func(t *testing.T) {
		cfg := small
		cfg.MaxConcurrent = 1
		f := newFixture(t, cfg)
		c, err := f.b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-start
				c.Done(nil)
			})
		}
		close(start)
		wg.Wait()
		if s := f.b.Snapshot(); s.Totals.Successes != 1 || s.Totals.Misuse != 7 || s.InFlight != 0 {
			t.Fatalf("totals %+v, in flight %d", s.Totals, s.InFlight)
		}
	})
}
