package hystrixgo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	"go.uber.org/goleak"

	cbhystrix "github.com/cbdash/cbdash/sdk/adapter/hystrixgo"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errDown     = errors.New("dependency down")
	errFallback = errors.New("fallback failed too")
)

type kind uint8

const (
	ok      kind = iota
	fail         // the run returns an error
	slow         // the run outlasts the command's Timeout
	give         // the caller's context runs out during the run
	runTime = 30 * time.Millisecond
)

// call is one call of a run's traffic: when it starts (from the run's
// start), how it goes, and its fallback (0 none, 1 succeeds, 2 fails).
type call struct {
	at       time.Duration
	kind     kind
	fallback int
}

// mix gives the i-th call of a run its kind and fallback: one in ten
// failing, one in 97 timing out, one in 89 given up by its caller; a
// third of the calls without a fallback, the others' fallbacks failing
// one time in two.
func mix(at time.Duration, i int, down bool) call {
	c := call{at: at, fallback: i % 3}
	switch {
	case down || i%10 == 9:
		c.kind = fail
	case i%97 == 50:
		c.kind = slow
	case i%89 == 40:
		c.kind = give
	}
	return c
}

// steadyCalls: 20 calls a second for d, and every call failing from
// outage for 20 s (the circuit opens, short-circuits for its sleep
// windows and closes once the outage is over).
func steadyCalls(d, outage time.Duration) (cs []call) {
	i := 0
	for at := 13 * time.Millisecond; at < d; at += 50 * time.Millisecond {
		cs = append(cs, mix(at, i, at >= outage && at < outage+20*time.Second))
		i++
	}
	return cs
}

// burstyCalls: bursts of 20-150 calls 5 ms apart (up to 0.75 s), 2.5-7.5
// s apart, for d: with runs of 30 ms, more than the command's 5 at once,
// so its bulkhead rejects some.
func burstyCalls(d time.Duration, seed uint64) (cs []call) {
	rng := rand.New(rand.NewPCG(seed, seed))
	i := 0
	for at := 2 * time.Second; at < d; at += time.Duration((0.5 + rng.Float64()) * float64(5*time.Second)) {
		for j := range 20 + rng.IntN(131) {
			cs = append(cs, mix(at+time.Duration(j)*5*time.Millisecond, i, false))
			i++
		}
	}
	return cs
}

// seen is what the callers saw: when a call was short-circuited, and
// when a run returned nil.
type seen struct {
	mu        sync.Mutex
	shorted   []time.Time
	succeeded []time.Time
}

func (s *seen) add(to *[]time.Time) {
	s.mu.Lock()
	*to = append(*to, time.Now())
	s.mu.Unlock()
}

// run makes the calls through command, each on its own goroutine at its
// time, and waits until every call and run has ended and hystrix-go has
// reported them all.
func run(command string, calls []call) *seen {
	s := &seen{}
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range calls {
		if d := time.Until(start.Add(c.at)); d > 0 {
			synctest.Sleep(d) // the bubble's clock, to the call's time
		}
		wg.Go(func() {
			ctx := context.Background()
			if c.kind == give {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, runTime/2)
				defer cancel()
			}
			runFn := func(context.Context) error {
				d := runTime
				if c.kind == slow {
					d = 1500 * time.Millisecond
				}
				<-time.After(d) // the call's duration, on the bubble's clock (one of many goroutines: no synctest.Sleep here)
				if c.kind == fail {
					return errDown
				}
				s.add(&s.succeeded)
				return nil
			}
			var fb func(context.Context, error) error
			if c.fallback > 0 {
				fb = func(_ context.Context, err error) error {
					if errors.Is(err, hystrix.ErrCircuitOpen) {
						s.add(&s.shorted)
					}
					if c.fallback == 2 {
						return errFallback
					}
					return nil
				}
			}
			err := hystrix.DoC(ctx, command, runFn, fb)
			if c.fallback == 0 && errors.Is(err, hystrix.ErrCircuitOpen) {
				s.add(&s.shorted)
			}
		})
	}
	wg.Wait()
	synctest.Sleep(2 * time.Second) // the runs that timed out end, and hystrix-go has reported every call
	return s
}

// Five minutes of a real hystrix-go command's calls, steady (20 a second,
// with a 20 s outage that opens and closes the circuit) and in bursts
// (which its bulkhead partly rejects), with failures, timeouts, calls
// given up by their callers and fallbacks that succeed or fail: every
// count the adapter reports is hystrix-go's own (a metric collector
// registered beside the adapter's), exactly, and the outage's open and
// close are reported as hystrix-go made them.
func TestCountsAreHystrixGosOwnExactly(t *testing.T) {
	const length = 5 * time.Minute
	ownTotals()
	for _, tc := range []struct {
		name  string
		calls []call
		max   int // MaxConcurrentRequests
	}{
		{"steady", steadyCalls(length, 120*time.Second), 100},
		{"bursty", burstyCalls(length, 7), 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				command := "counts-" + tc.name
				hystrix.ConfigureCommand(command, hystrix.CommandConfig{Timeout: 1000, MaxConcurrentRequests: tc.max,
					RequestVolumeThreshold: 20, SleepWindow: 5000, ErrorPercentThreshold: 50})
				reg := &registrar{}
				ad := cbhystrix.Register(reg, cbhystrix.Options{})
				if _, _, err := hystrix.GetCircuit(command); err != nil { // creates the circuit, and the source
					t.Fatal(err)
				}
				src := ad.Source(command)
				if src == nil || !slices.Equal(reg.names(), []string{command}) {
					t.Fatalf("registered %v, source %v", reg.names(), src)
				}
				var rec recorder
				defer src.Subscribe(rec.observe)()

				s := run(command, tc.calls)
				got := src.Snapshot()
				lib, runSum := ownOf(command).totals()
				ad.Close()
				endCircuits(t, command)

				if got.Totals != lib {
					t.Errorf("the adapter counted %+v\nhystrix-go counted   %+v", got.Totals, lib)
				}
				if n := got.Totals.Admitted + got.Totals.Rejected(); n != uint64(len(tc.calls)) {
					t.Errorf("%d calls counted, %d made", n, len(tc.calls))
				}
				for _, f := range []struct {
					name string
					n    uint64
				}{{"errors", lib.Errors}, {"timeouts", lib.Timeouts}, {"given up", lib.Ignored},
					{"fallback successes", lib.FallbackSuccesses}, {"fallback failures", lib.FallbackFailures}} {
					if f.n == 0 {
						t.Errorf("the traffic made no %s: %+v", f.name, lib)
					}
				}
				if tc.name == "bursty" && lib.RejectedBulkhead == 0 {
					t.Errorf("the bursts were never rejected by the bulkhead: %+v", lib)
				}
				var sum uint64
				for _, n := range got.Latency {
					sum += n
				}
				if sum != got.Totals.Successes+got.Totals.Failures || got.InFlight != 0 {
					t.Errorf("latency histogram of %d calls (in flight %d), want the %d successes and failures", sum, got.InFlight, got.Totals.Successes+got.Totals.Failures)
				}
				// Latencies: hystrix-go's run durations, and a timeout's
				// Timeout (1 s).
				if want := runSum + time.Duration(lib.Timeouts)*time.Second; got.LatencySum != want {
					t.Errorf("latency sum %v, want hystrix-go's run durations and the timeouts' Timeout: %v", got.LatencySum, want)
				}
				t.Logf("%s: %d calls, %+v", tc.name, len(tc.calls), got.Totals)

				ts := rec.get()
				checkTransitions(t, ts, s, got.State)
				if tc.name == "steady" {
					checkOutage(t, ts, s, lib)
				}
			})
		})
	}
}

// checkTransitions checks transitions against what the callers saw: they
// alternate between closed and open, in generations 1, 2...; every
// short-circuited call came while the adapter said open (in a bubble, the
// adapter sees the circuit open at the instant of the first
// short-circuit); every close came at the instant a run succeeded (the
// success reported while open closes hystrix-go's circuit, even from a
// call admitted before it opened), and state is the last transition's.
func checkTransitions(t *testing.T, ts []breaker.Transition, s *seen, state breaker.State) {
	t.Helper()
	want := breaker.Closed
	for i, tr := range ts {
		if tr.From != want || tr.Generation != uint64(i+1) {
			t.Fatalf("transition %d = %+v, want from %v, generation %d", i, tr, want, i+1)
		}
		want = tr.To
		if tr.To == breaker.Closed && !slices.ContainsFunc(s.succeeded, tr.At.Equal) {
			t.Errorf("closed at %v, when no run succeeded", tr.At)
		}
	}
	if state != want {
		t.Errorf("state %v, after transitions to %v", state, want)
	}
	for _, x := range s.shorted {
		in := false
		for i := 0; i < len(ts) && !in; i += 2 {
			in = !x.Before(ts[i].At) && (i+1 == len(ts) || !x.After(ts[i+1].At))
		}
		if !in {
			t.Errorf("a call was short-circuited at %v, while the adapter said closed", x)
		}
	}
	t.Logf("%d transitions, %d calls short-circuited", len(ts), len(s.shorted))
}

// checkOutage checks the steady run's transitions: closed to open by the
// time the first call was short-circuited (and at most a poll before),
// open to closed when the success that closed it ended, with no
// short-circuit after.
func checkOutage(t *testing.T, ts []breaker.Transition, s *seen, lib breaker.Totals) {
	t.Helper()
	if lib.RejectedOpen == 0 || len(s.shorted) == 0 {
		t.Fatalf("the outage did not open the circuit: %+v", lib)
	}
	var got []string
	for _, tr := range ts {
		got = append(got, fmt.Sprintf("%v>%v:%s", tr.From, tr.To, tr.Cause.Kind))
	}
	want := []string{"closed>open:library_rule", "open>closed:probes_succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
	opened, closed := ts[0], ts[1]
	first, last := slices.MinFunc(s.shorted, time.Time.Compare), slices.MaxFunc(s.shorted, time.Time.Compare)
	if opened.At.After(first) || opened.At.Before(first.Add(-cbhystrix.DefaultPollInterval)) {
		t.Errorf("opened at %v, the first call short-circuited at %v", opened.At, first)
	}
	if opened.OpenDuration != 5*time.Second || opened.Cause.Threshold != 50 || opened.Generation != 1 || closed.Generation != 2 {
		t.Errorf("open transition %+v, close %+v", opened, closed)
	}
	if !slices.ContainsFunc(s.succeeded, closed.At.Equal) || closed.At.Before(last) {
		t.Errorf("closed at %v: not when a run succeeded, or before the last short-circuit (%v)", closed.At, last)
	}
	t.Logf("opened %v, first short-circuit %v; closed %v, last short-circuit %v", opened.At.Format(time.TimeOnly+".000"),
		first.Format(time.TimeOnly+".000"), closed.At.Format(time.TimeOnly+".000"), last.Format(time.TimeOnly+".000"))
}

// A circuit that hystrix-go opens when it is asked (its IsOpen, here by
// the adapter's poll, as by hystrix-go's own stream) while no call comes
// is reported open by the poll: no short-circuit tells of it.
func TestPollSeesAnOpenNoCallSaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const command = "poll-open"
		hystrix.ConfigureCommand(command, hystrix.CommandConfig{RequestVolumeThreshold: 5, SleepWindow: 1000, ErrorPercentThreshold: 50})
		ad := cbhystrix.Register(&registrar{}, cbhystrix.Options{PollInterval: time.Second})
		for range 5 {
			_ = hystrix.Do(command, func() error { return errDown }, nil)
		}
		synctest.Wait()
		src := ad.Source(command)
		var rec recorder
		cancel := src.Subscribe(rec.observe)
		start := time.Now()
		synctest.Sleep(time.Second) // the poll
		ts := rec.get()
		if len(ts) != 1 || ts[0].To != breaker.Open || !ts[0].At.Equal(start.Add(time.Second)) || src.Snapshot().State != breaker.Open {
			t.Errorf("transitions %+v (state %v), want closed>open at the poll", ts, src.Snapshot().State)
		}
		if s := src.Snapshot().Totals; s.RejectedOpen != 0 || s.Errors != 5 {
			t.Errorf("totals %+v", s)
		}
		// The test call after SleepWindow succeeds: closed at once.
		synctest.Sleep(1500 * time.Millisecond)
		if err := hystrix.Do(command, func() error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ts := rec.get(); len(ts) != 2 || ts[1].To != breaker.Closed || !ts[1].At.Equal(start.Add(2500*time.Millisecond)) {
			t.Errorf("transitions %+v, want open>closed at the test call", ts)
		}
		cancel()
		ad.Close()
		endCircuits(t, command)
	})
}

// Describe gives hystrix-go's settings as it applies them (defaults for
// a command never configured), Options.Name names the breakers (or
// leaves a command out), a refused registration goes to OnError, and
// after Close the collectors count nothing.
func TestDescribeNamesRefusalAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &registrar{}
		var refused []string
		ad := cbhystrix.Register(reg, cbhystrix.Options{
			Name: func(c string) string {
				switch c {
				case "internal":
					return ""
				case "panics":
					panic("no name for it")
				}
				return "svc." + c
			},
			OnError: func(c string, err error) { refused = append(refused, c+": "+err.Error()) },
		})
		hystrix.ConfigureCommand("configured", hystrix.CommandConfig{Timeout: 250, MaxConcurrentRequests: 7,
			RequestVolumeThreshold: 9, SleepWindow: 1500, ErrorPercentThreshold: 30})
		for _, c := range []string{"configured", "plain", "internal", "panics"} {
			_ = hystrix.Do(c, func() error { return nil }, nil)
		}
		synctest.Wait()
		if !slices.Equal(reg.names(), []string{"svc.configured", "svc.plain"}) || ad.Source("internal") != nil || ad.Source("panics") != nil {
			t.Errorf("registered %v", reg.names())
		}
		cfg := ad.Source("configured").Describe()
		if cfg.Library != cbhystrix.Library || cfg.CallTimeoutMillis != 250 || cfg.MaxConcurrent != 7 || cfg.MinimumCalls != 9 ||
			cfg.OpenDurationMillis != 1500 || cfg.FailureRateThreshold != 30 || cfg.WindowKind != "time" || cfg.WindowMillis != 10000 ||
			cfg.Settings.String() != "ErrorPercentThreshold=30, MaxConcurrentRequests=7, RequestVolumeThreshold=9, SleepWindow=1.5s, Timeout=250ms" {
			t.Errorf("configured: %+v (settings %v)", cfg, cfg.Settings)
		}
		if s := ad.Source("plain").Describe().Settings.String(); s != "ErrorPercentThreshold=50, MaxConcurrentRequests=10, RequestVolumeThreshold=20, SleepWindow=5s, Timeout=1s" {
			t.Errorf("plain: settings %v, want hystrix-go's defaults", s)
		}
		if err := protocol.CheckName("breaker", cfg.Name); err != nil {
			t.Error(err)
		}

		reg.refuse = errors.New("too many breakers")
		_ = hystrix.Do("refused", func() error { return nil }, nil)
		if !slices.Equal(refused, []string{"refused: too many breakers"}) {
			t.Errorf("OnError told %v", refused)
		}

		ad.Close()
		ad.Close()
		_ = hystrix.Do("configured", func() error { return nil }, nil)
		_ = hystrix.Do("after", func() error { return nil }, nil)
		synctest.Wait()
		if s := ad.Source("configured").Snapshot().Totals; s.Successes != 1 || ad.Source("after") != nil {
			t.Errorf("after Close: configured %+v, after %v", s, ad.Source("after"))
		}
		endCircuits(t, "configured", "plain", "internal", "panics", "refused", "after")
	})
}
