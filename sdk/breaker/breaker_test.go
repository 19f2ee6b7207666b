package breaker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is when every fixture's virtual clock starts: the test epoch, which
// CBDASH_TEST_EPOCH moves (breakertest.Epoch).
var t0 = breakertest.Epoch()

// fixture is a breaker on a virtual clock, or on the system clock in a
// synctest bubble (newSystemFixture), that records its transitions.
type fixture struct {
	clk   *breakertest.Clock // nil: the system clock, in a bubble
	start time.Time          // when the fixture was made, on its clock
	b     *breaker.Breaker
	mu    sync.Mutex
	trans []breaker.Transition
}

func newFixture(tb testing.TB, cfg breaker.Config) *fixture {
	tb.Helper()
	f := &fixture{clk: breakertest.NewClock(t0), start: t0}
	cfg.Clock = f.clk
	f.b = mustNew(tb, "dep", cfg)
	f.subscribe()
	return f
}

// newSystemFixture is newFixture with a nil Config.Clock: the breaker
// measures time as in production, with time.Since and time.AfterFunc,
// which in a synctest bubble are the bubble's virtual clock and its
// timers. It must be called in a bubble.
func newSystemFixture(tb testing.TB, cfg breaker.Config) *fixture {
	tb.Helper()
	f := &fixture{start: time.Now()}
	cfg.Clock = nil
	f.b = mustNew(tb, "dep", cfg)
	f.subscribe()
	return f
}

func (f *fixture) subscribe() {
	f.b.Subscribe(func(t breaker.Transition) {
		f.mu.Lock()
		f.trans = append(f.trans, t)
		f.mu.Unlock()
	})
}

// onBothClocks runs test on a virtual clock that the fixture's advance
// moves, and on the system clock in a synctest bubble, where advance
// sleeps (the breaker's timers then fire on their own goroutines, as in
// production) and waits for what that set off.
func onBothClocks(t *testing.T, test func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture)) {
	t.Run("virtual clock", func(t *testing.T) { test(t, newFixture) })
	t.Run("system clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { test(t, newSystemFixture) })
	})
}

// advance moves the fixture's clock on by d.
func (f *fixture) advance(d time.Duration) {
	if f.clk != nil {
		f.clk.Advance(d)
		return
	}
	synctest.Sleep(d)
}

// now is the fixture's clock's time.
func (f *fixture) now() time.Time {
	if f.clk == nil {
		return time.Now()
	}
	return f.clk.Now()
}

// at is the instant d after the fixture was made.
func (f *fixture) at(d time.Duration) time.Time { return f.start.Add(d) }

// pending reports how many timers the virtual clock holds; ok is false
// on the system clock, which does not tell.
func (f *fixture) pending() (n int, ok bool) {
	if f.clk == nil {
		return 0, false
	}
	return f.clk.Pending(), true
}

func (f *fixture) transitions() []breaker.Transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]breaker.Transition(nil), f.trans...)
}

// run makes one call that takes d and returns err.
func (f *fixture) run(d time.Duration, err error) error {
	return f.b.Execute(context.Background(), func(context.Context) error {
		f.advance(d)
		return err
	})
}

var errBoom = errors.New("boom")

// small trips after 4 calls at 50% and stays open for a second.
var small = breaker.Config{Window: breaker.Window{Size: 4}, MinimumCalls: 4, OpenDuration: time.Second}

func (f *fixture) trip(tb testing.TB) {
	tb.Helper()
	for range 4 {
		_ = f.run(0, errBoom)
	}
	if s := f.b.State(); s != breaker.Open {
		tb.Fatalf("state %v after 4 failures, want open", s)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	cases := []struct {
		name  string
		cfg   breaker.Config
		field string
	}{
		{"threshold above 100", breaker.Config{FailureRateThreshold: 101}, "FailureRateThreshold"},
		{"negative threshold", breaker.Config{FailureRateThreshold: -1}, "FailureRateThreshold"},
		{"slow threshold above 100", breaker.Config{SlowCallRateThreshold: 100.5}, "SlowCallRateThreshold"},
		{"negative window size", breaker.Config{Window: breaker.Window{Size: -1}}, "Window.Size"},
		{"time window of size 0", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow}}, "Window.Duration"},
		{"buckets not dividing the window", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: 1000, Buckets: 3}}, "Window.Buckets"},
		{"unknown window kind", breaker.Config{Window: breaker.Window{Kind: 7}}, "Window.Kind"},
		{"negative open duration", breaker.Config{OpenDuration: -time.Second}, "OpenDuration"},
		{"negative slow call duration", breaker.Config{SlowCallDuration: -1}, "SlowCallDuration"},
		{"negative call timeout", breaker.Config{CallTimeout: -1}, "CallTimeout"},
		{"negative minimum calls", breaker.Config{MinimumCalls: -1}, "MinimumCalls"},
		{"negative half-open calls", breaker.Config{HalfOpenMaxCalls: -2}, "HalfOpenMaxCalls"},
		{"negative bulkhead", breaker.Config{MaxConcurrent: -1}, "MaxConcurrent"},
		{"shrinking backoff", breaker.Config{OpenBackoff: breaker.Backoff{Multiplier: 0.5}}, "OpenBackoff.Multiplier"},
		{"jitter above 1", breaker.Config{OpenBackoff: breaker.Backoff{Jitter: 2}}, "OpenBackoff.Jitter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := breaker.New("x", tc.cfg)
			if !errors.Is(err, breaker.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New = %v, want an ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
	t.Run("a name is required", func(t *testing.T) {
		if _, err := breaker.New("", breaker.Config{}); !errors.Is(err, breaker.ErrInvalidConfig) {
			t.Errorf("New with no name = %v", err)
		}
	})
}

func TestZeroConfigTakesTheDefaults(t *testing.T) {
	c := mustNew(t, "x", breaker.Config{}).Config()
	if c.Window.Kind != breaker.CountWindow || c.Window.Size != 100 || c.FailureRateThreshold != 50 ||
		c.SlowCallRateThreshold != 100 || c.MinimumCalls != 10 || c.OpenDuration != time.Minute ||
		c.HalfOpenMaxCalls != 1 || c.HalfOpenSuccessThreshold != 1 || c.Classify == nil ||
		c.CallTimeout != 0 || c.MaxConcurrent != 0 || c.SlowCallDuration != 0 {
		t.Errorf("defaults: %+v", c)
	}
	tw := mustNew(t, "x", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: time.Second}}).Config()
	if tw.Window.Buckets != 10 {
		t.Errorf("time window buckets default to %d, want 10", tw.Window.Buckets)
	}
}

func TestExecute(t *testing.T) {
	t.Run("passes a panic on after recording it as a failure", func(t *testing.T) {
		f := newFixture(t, small)
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Errorf("recovered %v, want the call's own panic", r)
				}
			}()
			_ = f.b.Execute(context.Background(), func(context.Context) error { panic("kaboom") })
		}()
		tot := f.b.Snapshot().Totals
		if tot.Panics != 1 || tot.Failures != 1 || tot.Admitted != 1 {
			t.Errorf("totals %+v, want one panic", tot)
		}
		if got := f.b.Snapshot().Window.Failures; got != 1 {
			t.Errorf("window failures %d, want 1", got)
		}
	})
	t.Run("does not count the caller giving up as a failure", func(t *testing.T) {
		f := newFixture(t, small)
		ctx, cancel := context.WithCancel(context.Background())
		err := f.b.Execute(ctx, func(ctx context.Context) error {
			cancel()
			return errBoom // whatever the error, the caller gave up
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("Execute = %v, want the call's error", err)
		}
		s := f.b.Snapshot()
		if s.Totals.Ignored != 1 || s.Totals.Failures != 0 || s.Window.Calls != 0 {
			t.Errorf("totals %+v window %+v: a canceled call must not be recorded", s.Totals, s.Window)
		}
	})
	t.Run("counts a dependency's deadline as a timeout when the caller is still waiting", func(t *testing.T) {
		f := newFixture(t, small)
		_ = f.run(0, context.DeadlineExceeded)
		if tot := f.b.Snapshot().Totals; tot.Timeouts != 1 {
			t.Errorf("totals %+v, want one timeout", tot)
		}
	})
	t.Run("does not record an ignorable error", func(t *testing.T) {
		f := newFixture(t, small)
		err := f.run(0, breaker.Ignorable(errBoom))
		if !errors.Is(err, errBoom) || !breaker.IsIgnorable(err) {
			t.Errorf("Execute = %v, want the marked error", err)
		}
		if s := f.b.Snapshot(); s.Totals.Ignored != 1 || s.Window.Calls != 0 {
			t.Errorf("totals %+v window %+v", s.Totals, s.Window)
		}
	})
	t.Run("times a call out at its deadline through its context", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			cfg := small
			cfg.CallTimeout = 200 * time.Millisecond
			f := newFixture(t, cfg)
			var cause error
			err := f.b.Execute(context.Background(), func(ctx context.Context) error {
				f.advance(150 * time.Millisecond)
				if ctx.Err() != nil {
					t.Error("context done before the deadline")
				}
				f.advance(100 * time.Millisecond)
				cause = context.Cause(ctx)
				return nil // a late success, thrown away
			})
			if !errors.Is(err, breaker.ErrTimeout) || !errors.Is(cause, breaker.ErrTimeout) {
				t.Errorf("Execute = %v, cause %v; want ErrTimeout for both", err, cause)
			}
			s := f.b.Snapshot()
			if s.Totals.Timeouts != 1 || s.Totals.Successes != 0 || s.Window.Failures != 1 {
				t.Errorf("totals %+v window %+v, want one timeout", s.Totals, s.Window)
			}
			if s.LatencySum != 200*time.Millisecond {
				t.Errorf("latency sum %v, want the timeout (200ms)", s.LatencySum)
			}
			if n, ok := f.pending(); ok && n != 0 {
				t.Errorf("%d timers left", n)
			}
		})
	})
	t.Run("does not time out a call that ended in time", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			cfg := small
			cfg.CallTimeout = time.Second
			f := newFixture(t, cfg)
			if err := f.run(10*time.Millisecond, nil); err != nil {
				t.Fatal(err)
			}
			f.advance(time.Hour)
			if tot := f.b.Snapshot().Totals; tot.Successes != 1 || tot.Timeouts != 0 {
				t.Errorf("totals %+v", tot)
			}
			if n, ok := f.pending(); ok && n != 0 {
				t.Errorf("%d timers left with no call in flight", n)
			}
		})
	})
	t.Run("times out calls in order of their deadlines, with one timer", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			cfg := small
			cfg.CallTimeout = 100 * time.Millisecond
			cfg.Window.Size = 10
			cfg.MinimumCalls = 10
			f := newFixture(t, cfg)
			var calls []breaker.Call
			for range 5 {
				c, err := f.b.Allow()
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, c)
				f.advance(30 * time.Millisecond)
			}
			if n, ok := f.pending(); ok && n != 1 {
				t.Errorf("%d timers for 5 calls, want 1", n)
			}
			// Calls started at 0, 30, 60, 90 and 120ms; now it is 150ms.
			calls[0].Done(nil) // timed out at 100ms: thrown away
			calls[3].Done(nil) // in time (deadline 190ms)
			s := f.b.Snapshot()
			if s.Totals.Timeouts != 2 || s.Totals.Successes != 1 || s.InFlight != 2 {
				t.Errorf("at 150ms: totals %+v in flight %d", s.Totals, s.InFlight)
			}
			f.advance(60 * time.Millisecond) // 210ms: the call of 60ms (deadline 160) is past
			s = f.b.Snapshot()
			if s.Totals.Timeouts != 3 || s.InFlight != 1 {
				t.Errorf("at 220ms: totals %+v in flight %d", s.Totals, s.InFlight)
			}
			f.advance(time.Second)
			s = f.b.Snapshot()
			if n, ok := f.pending(); s.Totals.Timeouts != 4 || s.InFlight != 0 || (ok && n != 0) {
				t.Errorf("at the end: totals %+v in flight %d, %d timers", s.Totals, s.InFlight, n)
			}
			if s.LatencySum != 4*100*time.Millisecond+60*time.Millisecond {
				t.Errorf("latency sum %v: timeouts must end exactly at their deadlines", s.LatencySum)
			}
		})
	})
	t.Run("uses Classify", func(t *testing.T) {
		cfg := small
		cfg.Classify = func(err error) breaker.Outcome {
			if errors.Is(err, errBoom) {
				return breaker.Success
			}
			return breaker.DefaultClassify(err)
		}
		f := newFixture(t, cfg)
		_ = f.run(0, errBoom)
		if tot := f.b.Snapshot().Totals; tot.Successes != 1 {
			t.Errorf("totals %+v, want the classifier's success", tot)
		}
	})
	t.Run("rejections tell their reason apart", func(t *testing.T) {
		f := newFixture(t, small)
		f.trip(t)
		err := f.run(0, nil)
		if !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, breaker.ErrRejected) || errors.Is(err, breaker.ErrForcedOpen) {
			t.Errorf("open rejection %v", err)
		}
		if _, err := f.b.Apply(breaker.Command{Action: breaker.ActionForceOpen}); err != nil {
			t.Fatal(err)
		}
		err = f.run(0, nil)
		if !errors.Is(err, breaker.ErrForcedOpen) || !errors.Is(err, breaker.ErrRejected) || errors.Is(err, breaker.ErrOpen) {
			t.Errorf("forced rejection %v", err)
		}
		if tot := f.b.Snapshot().Totals; tot.RejectedOpen != 1 || tot.RejectedForcedOpen != 1 || tot.Failures != 4 {
			t.Errorf("totals %+v", tot)
		}
	})
}

func TestDefaultClassify(t *testing.T) {
	cases := []struct {
		err  error
		want breaker.Outcome
	}{
		{nil, breaker.Success},
		{errBoom, breaker.Failure},
		{breaker.ErrTimeout, breaker.Timeout},
		{context.DeadlineExceeded, breaker.Timeout},
		{context.Canceled, breaker.Canceled},
		{breaker.Ignorable(errBoom), breaker.Ignored},
		{breaker.Ignorable(context.Canceled), breaker.Ignored},
	}
	for _, tc := range cases {
		if got := breaker.DefaultClassify(tc.err); got != tc.want {
			t.Errorf("DefaultClassify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if breaker.Ignorable(nil) != nil {
		t.Error("Ignorable(nil) is not nil")
	}
}

func TestFallback(t *testing.T) {
	fb := func(_ context.Context, err error) error {
		if errors.Is(err, breaker.ErrOpen) {
			return nil
		}
		return errors.New("fallback failed too")
	}
	f := newFixture(t, small)
	ctx := context.Background()
	if err := f.b.ExecuteWithFallback(ctx, func(context.Context) error { return nil }, fb); err != nil {
		t.Errorf("success: %v", err)
	}
	if err := f.b.ExecuteWithFallback(ctx, func(context.Context) error { return breaker.Ignorable(errBoom) }, fb); !errors.Is(err, errBoom) {
		t.Errorf("an ignored error must be returned as it is, without fallback: %v", err)
	}
	if err := f.b.ExecuteWithFallback(ctx, func(context.Context) error { return errBoom }, fb); err == nil || errors.Is(err, errBoom) {
		t.Errorf("a failure must go to the fallback: %v", err)
	}
	f.trip(t)
	if err := f.b.ExecuteWithFallback(ctx, func(context.Context) error { return nil }, fb); err != nil {
		t.Errorf("a rejection must go to the fallback: %v", err)
	}
	tot := f.b.Snapshot().Totals
	if tot.FallbackSuccesses != 1 || tot.FallbackFailures != 1 {
		t.Errorf("fallbacks %d ok, %d failed; want 1 and 1", tot.FallbackSuccesses, tot.FallbackFailures)
	}

	f.b.RecordFallback(nil)
	f.b.RecordFallback(errBoom)
	tot = f.b.Snapshot().Totals
	if tot.FallbackSuccesses != 2 || tot.FallbackFailures != 2 || tot.Admitted != 5 {
		t.Errorf("after RecordFallback: %+v", tot)
	}

	v, err := breaker.DoWithFallback(ctx, f.b, func(context.Context) (int, error) { return 1, nil },
		func(_ context.Context, err error) (int, error) { return 2, nil })
	if v != 2 || err != nil {
		t.Errorf("DoWithFallback while open = %d, %v; want the fallback's 2", v, err)
	}
}

func TestDo(t *testing.T) {
	f := newFixture(t, small)
	ctx := context.Background()
	v, err := breaker.Do(ctx, f.b, func(context.Context) (string, error) { return "hello", nil })
	if v != "hello" || err != nil {
		t.Errorf("Do = %q, %v", v, err)
	}
	f.trip(t)
	v, err = breaker.Do(ctx, f.b, func(context.Context) (string, error) { return "ran", nil })
	if v != "" || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("Do while open = %q, %v; want the zero value and ErrOpen", v, err)
	}
	cfg := small
	cfg.CallTimeout = time.Second
	g := newFixture(t, cfg)
	v, err = breaker.Do(ctx, g.b, func(context.Context) (string, error) {
		g.clk.Advance(2 * time.Second)
		return "late", nil
	})
	if v != "" || !errors.Is(err, breaker.ErrTimeout) {
		t.Errorf("Do after its timeout = %q, %v; want the late result thrown away", v, err)
	}
}

func TestAllow(t *testing.T) {
	t.Run("two steps record like Execute", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			f := newFixture(t, small)
			for range 4 {
				c, err := f.b.Allow()
				if err != nil {
					t.Fatal(err)
				}
				if !c.Started().Equal(f.now()) {
					t.Errorf("Started() = %v, want %v", c.Started(), f.now())
				}
				f.advance(3 * time.Millisecond)
				c.Done(errBoom)
			}
			if _, err := f.b.Allow(); !errors.Is(err, breaker.ErrOpen) {
				t.Errorf("Allow after 4 failures = %v, want ErrOpen", err)
			}
			s := f.b.Snapshot()
			if s.Latency[2] != 4 || s.LatencySum != 12*time.Millisecond {
				t.Errorf("latency %v sum %v; want 4 calls in the (2ms, 5ms] bucket", s.Latency, s.LatencySum)
			}
		})
	})
	t.Run("a call past its timeout is a timeout and its late result is thrown away", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			cfg := small
			cfg.CallTimeout = time.Second
			cfg.MaxConcurrent = 1
			f := newFixture(t, cfg)
			c, err := f.b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			if s := f.b.Snapshot(); s.InFlight != 1 {
				t.Errorf("in flight %d, want 1", s.InFlight)
			}
			f.advance(time.Second)
			if s := f.b.Snapshot(); s.InFlight != 0 || s.Totals.Timeouts != 1 {
				t.Errorf("after the timeout: in flight %d totals %+v", s.InFlight, s.Totals)
			}
			if _, err := f.b.Allow(); err != nil {
				t.Errorf("the timed-out call must free its bulkhead slot: %v", err)
			}
			c.Done(nil)
			if tot := f.b.Snapshot().Totals; tot.Successes != 0 {
				t.Errorf("the late result was recorded: %+v", tot)
			}
		})
	})
	t.Run("the zero Call ignores Done", func(t *testing.T) {
		var c breaker.Call
		c.Done(errBoom)
		c.Report(breaker.Failure)
	})
}

// TestTransitionCauses runs on both clocks: on the system clock, the open
// durations, the probe's timeout and the forced state's expiry are the
// breaker's own timers and time.Since, as in production.
func TestTransitionCauses(t *testing.T) {
	onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
		cfg := small
		cfg.OpenBackoff = breaker.Backoff{Multiplier: 2, Max: 3 * time.Second}
		f := newFixture(t, cfg)
		_ = f.run(0, nil)
		_ = f.run(0, nil)
		_ = f.run(0, errBoom)
		_ = f.run(0, errBoom)
		f.advance(time.Second)
		_ = f.run(time.Millisecond, breaker.ErrTimeout) // probe fails
		f.advance(2 * time.Second)
		_ = f.run(0, nil) // probe succeeds
		if _, err := f.b.Apply(breaker.Command{ID: "c1", Action: breaker.ActionForceOpen, TTL: time.Minute, Reason: "maintenance", Actor: "ana"}); err != nil {
			t.Fatal(err)
		}
		f.advance(time.Minute)
		_ = f.b.State()

		tr := f.transitions()
		want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed", "closed>forced_open", "forced_open>closed"}
		if len(tr) != len(want) {
			t.Fatalf("%d transitions %v, want %v", len(tr), tr, want)
		}
		for i, w := range want {
			if got := tr[i].From.String() + ">" + tr[i].To.String(); got != w {
				t.Errorf("transition %d is %s, want %s", i, got, w)
			}
			if i > 0 && tr[i].Generation <= tr[i-1].Generation {
				t.Errorf("generation %d after %d", tr[i].Generation, tr[i-1].Generation)
			}
			if tr[i].Breaker != "dep" {
				t.Errorf("breaker name %q", tr[i].Breaker)
			}
		}
		c := tr[0].Cause
		if c.Kind != breaker.CauseFailureRate || c.FailureRate != 50 || c.Threshold != 50 || c.Window.Calls != 4 || c.Window.Failures != 2 {
			t.Errorf("trip cause %+v", c)
		}
		if tr[0].OpenDuration != time.Second || !tr[0].At.Equal(f.at(0)) {
			t.Errorf("trip open for %v at %v", tr[0].OpenDuration, tr[0].At)
		}
		if c := tr[1].Cause; c.Kind != breaker.CauseOpenElapsed || !tr[1].At.Equal(f.at(time.Second)) {
			t.Errorf("half-open cause %+v at %v", c, tr[1].At)
		}
		if c := tr[2].Cause; c.Kind != breaker.CauseProbeFailed || c.ProbeOutcome != "timeout" || tr[2].OpenDuration != 2*time.Second {
			t.Errorf("probe failure cause %+v, open %v (want timeout, 2s of backoff)", c, tr[2].OpenDuration)
		}
		if c := tr[4].Cause; c.Kind != breaker.CauseProbesSucceeded {
			t.Errorf("close cause %+v", c)
		}
		if c := tr[5].Cause; c.Kind != breaker.CauseCommand || c.Command == nil || c.Command.Reason != "maintenance" || c.Command.Actor != "ana" || !c.ExpiresAt.Equal(tr[5].At.Add(time.Minute)) {
			t.Errorf("command cause %+v", c)
		}
		if c := tr[6].Cause; c.Kind != breaker.CauseExpired || c.Command == nil || c.Command.ID != "c1" || !tr[6].At.Equal(tr[5].At.Add(time.Minute)) {
			t.Errorf("expiry cause %+v at %v", c, tr[6].At)
		}
	})
}

func TestSlowCallTrip(t *testing.T) {
	onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
		cfg := small
		cfg.SlowCallDuration = 100 * time.Millisecond
		cfg.SlowCallRateThreshold = 75
		f := newFixture(t, cfg)
		_ = f.run(0, nil)
		for range 3 {
			_ = f.run(100*time.Millisecond, nil)
		}
		tr := f.transitions()
		if len(tr) != 1 || tr[0].Cause.Kind != breaker.CauseSlowCallRate || tr[0].Cause.SlowCallRate != 75 || tr[0].Cause.Threshold != 75 {
			t.Fatalf("transitions %+v, want one slow_call_rate trip at 75%%", tr)
		}
		f.advance(time.Second)
		_ = f.run(100*time.Millisecond, nil) // a slow success is a failed probe
		tr = f.transitions()
		if last := tr[len(tr)-1]; last.To != breaker.Open || last.Cause.ProbeOutcome != "slow" {
			t.Errorf("last transition %+v, want a probe failed as slow", last)
		}
	})
}

func TestObservers(t *testing.T) {
	t.Run("a panicking observer does not stop the others", func(t *testing.T) {
		f := newFixture(t, small)
		f.b.Subscribe(func(breaker.Transition) { panic("observer bug") })
		var got int
		f.b.Subscribe(func(breaker.Transition) { got++ })
		f.trip(t)
		if got != 1 || len(f.transitions()) != 1 {
			t.Errorf("later observer saw %d, first %d", got, len(f.transitions()))
		}
	})
	t.Run("an observer may call the breaker, and its transition comes after", func(t *testing.T) {
		f := newFixture(t, small)
		var seen []string
		f.b.Subscribe(func(tr breaker.Transition) {
			seen = append(seen, tr.To.String())
			if tr.To == breaker.Open {
				if _, err := f.b.Apply(breaker.Command{Action: breaker.ActionForceOpen}); err != nil {
					t.Error(err)
				}
			}
			_ = f.b.Snapshot()
		})
		for range 4 {
			_ = f.run(0, errBoom)
		}
		if strings.Join(seen, ",") != "open,forced_open" {
			t.Errorf("seen %v", seen)
		}
	})
	t.Run("cancel stops delivery", func(t *testing.T) {
		f := newFixture(t, small)
		n := 0
		cancel := f.b.Subscribe(func(breaker.Transition) { n++ })
		cancel()
		cancel()
		f.trip(t)
		if n != 0 {
			t.Errorf("canceled observer called %d times", n)
		}
	})
	t.Run("a snapshot subscription sees exactly what comes after the snapshot", func(t *testing.T) {
		f := newFixture(t, small)
		f.trip(t)
		var seen []breaker.Transition
		snap, cancel := f.b.SubscribeSnapshot(func(tr breaker.Transition) { seen = append(seen, tr) })
		defer cancel()
		f.clk.Advance(time.Second)
		_ = f.b.State()
		if snap.State != breaker.Open || len(seen) != 1 || seen[0].From != breaker.Open || seen[0].Generation != snap.Generation+1 {
			t.Errorf("snapshot %v gen %d, then %+v", snap.State, snap.Generation, seen)
		}
	})
}

func TestSnapshot(t *testing.T) {
	t.Run("reading changes nothing", func(t *testing.T) {
		f := newFixture(t, small)
		_ = f.run(0, errBoom)
		a := f.b.Snapshot()
		b := f.b.Snapshot()
		if a.Generation != b.Generation || a.Window != b.Window || a.Totals != b.Totals || len(f.transitions()) != 0 {
			t.Errorf("two snapshots differ: %+v / %+v", a, b)
		}
	})
	t.Run("headroom: the window beside its thresholds", func(t *testing.T) {
		onBothClocks(t, func(t *testing.T, newFixture func(testing.TB, breaker.Config) *fixture) {
			cfg := small
			cfg.SlowCallDuration = time.Second
			f := newFixture(t, cfg)
			_ = f.run(0, errBoom)
			_ = f.run(0, nil)
			_ = f.run(time.Second, nil)
			s := f.b.Snapshot()
			if s.Window.Calls != 3 || s.Window.Failures != 1 || s.Window.Slow != 1 || s.FailureRateThreshold != 50 ||
				s.SlowCallRateThreshold != 100 || s.MinimumCalls != 4 || s.Window.FailureRate < 33.3 || s.Window.FailureRate > 33.4 {
				t.Errorf("snapshot %+v", s)
			}
			if !s.At.Equal(f.at(time.Second)) || s.Name != "dep" {
				t.Errorf("snapshot at %v name %q", s.At, s.Name)
			}
		})
	})
	t.Run("a forced state shows its command and expiry", func(t *testing.T) {
		f := newFixture(t, small)
		cmd := breaker.Command{ID: "x", Action: breaker.ActionForceClosed, TTL: time.Hour, Reason: "r"}
		if st, err := f.b.Apply(cmd); err != nil || st != breaker.ForcedClosed {
			t.Fatalf("Apply = %v, %v", st, err)
		}
		s := f.b.Snapshot()
		if s.Forced == nil || *s.Forced != cmd || !s.ForcedUntil.Equal(t0.Add(time.Hour)) {
			t.Errorf("forced %+v until %v", s.Forced, s.ForcedUntil)
		}
		gen := s.Generation
		if _, err := f.b.Apply(breaker.Command{ID: "y", Action: breaker.ActionForceClosed}); err != nil {
			t.Fatal(err)
		}
		s = f.b.Snapshot()
		if s.Generation != gen || !s.ForcedUntil.IsZero() || s.Forced.ID != "y" {
			t.Errorf("repeated force: gen %d (was %d) until %v by %+v", s.Generation, gen, s.ForcedUntil, s.Forced)
		}
	})
}

func TestApplyRejectsBadCommands(t *testing.T) {
	f := newFixture(t, small)
	for _, c := range []breaker.Command{{Action: "explode"}, {Action: breaker.ActionForceOpen, TTL: -time.Second}} {
		st, err := f.b.Apply(c)
		if !errors.Is(err, breaker.ErrInvalidCommand) || st != breaker.Closed {
			t.Errorf("Apply(%+v) = %v, %v", c, st, err)
		}
	}
	if len(f.transitions()) != 0 {
		t.Error("a bad command made a transition")
	}
}

func TestJitterSpreadsOpenDurations(t *testing.T) {
	cfg := small
	cfg.OpenBackoff.Jitter = 0.5
	f := newFixture(t, cfg)
	seen := map[time.Duration]bool{}
	for range 20 {
		f.trip(t)
		d := f.transitions()[len(f.transitions())-1].OpenDuration
		if d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("open for %v, outside 1s +/- 50%%", d)
		}
		seen[d] = true
		if _, err := f.b.Apply(breaker.Command{Action: breaker.ActionReset}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d different open durations in 20 trips", len(seen))
	}
}

// TestSystemClock runs a breaker with a nil Config.Clock in a synctest
// bubble, whose clock is the system's there: the breaker's time, its time
// window and SystemClock's AfterFunc follow it exactly.
func TestSystemClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b := mustNew(t, "real", breaker.Config{CallTimeout: time.Hour, MinimumCalls: 100,
			Window: breaker.Window{Kind: breaker.TimeWindow, Duration: 10 * time.Second, Buckets: 10}})
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if s := b.Snapshot(); s.Totals.Successes != 1 || s.Window.Calls != 1 || !s.At.Equal(start) {
			t.Errorf("snapshot %+v, want one success in the window at %v", s, start)
		}
		synctest.Sleep(10 * time.Second) // the window slides past the call
		if s := b.Snapshot(); s.Totals.Successes != 1 || s.Window.Calls != 0 || !s.At.Equal(start.Add(10*time.Second)) {
			t.Errorf("snapshot %+v, want the call out of the window at %v", s, start.Add(10*time.Second))
		}
		c := breaker.SystemClock()
		done := make(chan time.Time)
		fired := time.Now()
		c.AfterFunc(time.Millisecond, func() { done <- time.Now() })
		if at := <-done; at.Sub(fired) != time.Millisecond {
			t.Errorf("AfterFunc(1ms) ran %v later", at.Sub(fired))
		}
	})
}
