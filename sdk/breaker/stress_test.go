package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// tally is what the callers themselves saw.
type tally struct {
	admitted, successes, failures, ignored, timeouts, panics atomic.Uint64
	rejected                                                 [4]atomic.Uint64 // open, half-open full, forced open, bulkhead
}

func (t *tally) reject(err error) {
	for i, r := range []error{breaker.ErrOpen, breaker.ErrHalfOpenFull, breaker.ErrForcedOpen, breaker.ErrBulkheadFull} {
		if errors.Is(err, r) {
			t.rejected[i].Add(1)
		}
	}
}

// TestStress hammers one breaker from many goroutines through many
// closed, open, half-open cycles (and operator commands) while a driver
// moves the virtual clock and switches the dependency between healthy
// and failing. It checks that every state change is reported exactly
// once, in one unbroken chain; that no call is rejected with a reason
// that does not match the state; that no more probes than allowed run at
// once; and that the totals match what the callers saw, exactly.
func TestStress(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bulkhead int
		window   breaker.Window
		commands bool
	}{
		{"count window, with panics", 0, breaker.Window{Size: 20}, false},
		{"time window with bulkhead, commands and timeouts", 6, breaker.Window{Kind: breaker.TimeWindow, Duration: 100 * time.Millisecond, Buckets: 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { stress(t, tc.window, tc.bulkhead, tc.commands) })
	}
}

// execute runs fn through b, recovering a panic from fn.
func execute(b *breaker.Breaker, fn func(context.Context) error) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			panicked = true
		}
	}()
	return b.Execute(context.Background(), fn), false
}

// report sends err without blocking (the first errors are enough).
func report(errs chan<- error, err error) {
	select {
	case errs <- err:
	default:
	}
}

func stress(t *testing.T, win breaker.Window, bulkhead int, commands bool) {
	timeouts := commands
	const workers, calls = 8, 4000
	clk := breakertest.NewClock(t0)
	cfg := breaker.Config{
		Window: win, MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: 20 * time.Millisecond,
		HalfOpenMaxCalls: 3, HalfOpenSuccessThreshold: 2, MaxConcurrent: bulkhead, Clock: clk,
	}
	if timeouts {
		cfg.CallTimeout = 3 * time.Millisecond
	}
	b := mustNew(t, "stress", cfg)
	var ch chain
	b.Subscribe(ch.observe)

	var tl tally
	var probesMu sync.Mutex
	probes := map[uint64]int{} // half-open generation -> probes running
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	// Each caller moves the virtual clock now and then, so that time
	// passes in step with the calls; the dependency fails for 50ms out of
	// every 100ms.
	failing := func() bool { return clk.Now().Sub(t0)/(50*time.Millisecond)%2 == 0 }
	acts := []breaker.Action{breaker.ActionForceOpen, breaker.ActionForceClosed, breaker.ActionRelease, breaker.ActionReset}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range calls {
				if r.IntN(4) == 0 {
					clk.Advance(time.Millisecond)
				}
				if commands && r.IntN(1500) == 0 {
					if _, err := b.Apply(breaker.Command{Action: acts[r.IntN(len(acts))], TTL: time.Duration(r.IntN(3)) * 10 * time.Millisecond}); err != nil {
						report(errs, err)
						return
					}
				}
				before := b.Snapshot()
				var intent breaker.Outcome
				err, panicked := execute(b, func(context.Context) error {
					tl.admitted.Add(1)
					if before.State == breaker.HalfOpen {
						if inside := b.Snapshot(); inside.Generation == before.Generation {
							probesMu.Lock()
							probes[before.Generation]++
							n := probes[before.Generation]
							probesMu.Unlock()
							defer func() {
								probesMu.Lock()
								probes[before.Generation]--
								probesMu.Unlock()
							}()
							if n > cfg.HalfOpenMaxCalls {
								report(errs, errors.New("more probes than HalfOpenMaxCalls at once"))
							}
							runtime.Gosched()
						}
					}
					switch p := r.IntN(1000); {
					case timeouts && p < 20:
						clk.Advance(2 * cfg.CallTimeout) // runs into its own timeout
						intent = breaker.Timeout
						return nil
					case !timeouts && p < 10:
						intent = breaker.Panic
						panic("dependency bug")
					case p < 60:
						intent = breaker.Ignored
						return breaker.Ignorable(errBoom)
					case failing() && p < 800, p < 100:
						intent = breaker.Failure
						return errBoom
					}
					intent = breaker.Success
					return nil
				})
				switch {
				case errors.Is(err, breaker.ErrRejected):
				case errors.Is(err, breaker.ErrTimeout): // the breaker's timeout ended it, maybe another caller's clock move
					tl.timeouts.Add(1)
				case panicked:
					tl.panics.Add(1)
				case intent == breaker.Success:
					tl.successes.Add(1)
				case intent == breaker.Failure:
					tl.failures.Add(1)
				case intent == breaker.Ignored:
					tl.ignored.Add(1)
				default:
					report(errs, fmt.Errorf("call meant to end as %v returned %v", intent, err))
				}
				if errors.Is(err, breaker.ErrRejected) {
					tl.reject(err)
					after := b.Snapshot()
					if after.Generation == before.Generation {
						if e := checkRejection(before.State, err, bulkhead > 0); e != nil {
							report(errs, e)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	last, n, opens, err := ch.check()
	if err != nil {
		t.Fatal(err)
	}
	s := b.Snapshot()
	if s.State != last && n > 0 {
		t.Errorf("state %v, but the last transition went to %v", s.State, last)
	}
	if opens < 10 {
		t.Errorf("only %d trips to open in %d transitions: the stress did not cycle", opens, n)
	}
	if err := checkTotals(s); err != nil {
		t.Fatal(err)
	}
	tot := s.Totals
	if tot.Admitted != tl.admitted.Load() || tot.Successes != tl.successes.Load() || tot.Errors != tl.failures.Load() ||
		tot.Ignored != tl.ignored.Load() || tot.Timeouts != tl.timeouts.Load() || tot.Panics != tl.panics.Load() || s.InFlight != 0 {
		t.Errorf("totals %+v, callers saw admitted %d successes %d failures %d ignored %d timeouts %d panics %d",
			tot, tl.admitted.Load(), tl.successes.Load(), tl.failures.Load(), tl.ignored.Load(), tl.timeouts.Load(), tl.panics.Load())
	}
	if (timeouts && tot.Timeouts == 0) || (!timeouts && tot.Panics == 0) {
		t.Errorf("no timeouts or panics happened: %+v", tot)
	}
	if tot.RejectedOpen != tl.rejected[0].Load() || tot.RejectedHalfOpenFull != tl.rejected[1].Load() ||
		tot.RejectedForcedOpen != tl.rejected[2].Load() || tot.RejectedBulkhead != tl.rejected[3].Load() {
		t.Errorf("rejections %+v, callers saw %d %d %d %d", tot, tl.rejected[0].Load(), tl.rejected[1].Load(), tl.rejected[2].Load(), tl.rejected[3].Load())
	}
	if tot.Admitted+tot.Rejected() != workers*calls {
		t.Errorf("admitted %d + rejected %d != %d calls", tot.Admitted, tot.Rejected(), workers*calls)
	}
	t.Logf("%d transitions, %d trips, totals %+v", n, opens, tot)
}
