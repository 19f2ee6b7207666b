// Package bench compares the cost of a call through cbdash's breaker with
// sony/gobreaker and failsafe-go, in one run. It is a module of its own so
// that the product's go.mod names none of them.
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 5
package bench

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"
)

// Each contender is configured alike: a closed breaker judging the failure
// rate (50%) over its last 100 calls once it has 10, open for a minute.
// cbdash runs with all its instrumentation (counters, latency histogram,
// sliding window), which cannot be turned off.

func newCbdash(b *testing.B) *breaker.Breaker {
	cb, err := breaker.New("bench", breaker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return cb
}

func newGobreaker() *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:    "bench",
		Timeout: time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= 10 && c.TotalFailures*2 >= c.Requests
		},
	})
}

func newFailsafe() failsafe.Executor[any] {
	cb := circuitbreaker.NewBuilder[any]().
		WithFailureThresholdRatio(50, 100).
		WithDelay(time.Minute).
		Build()
	return failsafe.With[any](cb)
}

var errDown = errors.New("down")

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measured runs loop (which runs b.N calls) and reports, besides ns/op
// (wall time), cpu-ns/op: the process's CPU time per call. On a shared
// machine the wall time depends on how much CPU the scheduler grants the
// benchmark (a contender whose threads sleep on a mutex is favoured over
// one whose threads never block); CPU time per call is what the breaker
// itself costs.
func measured(b *testing.B, loop func()) {
	start := cpuTime(b)
	loop()
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

func ok(context.Context) error { return nil }

// BenchmarkExecute is one successful call through a closed breaker.
func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	b.Run("cbdash", func(b *testing.B) {
		cb := newCbdash(b)
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if err := cb.Execute(ctx, ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if _, err := cb.Execute(func() (any, error) { return nil, nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		ex := newFailsafe()
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if err := ex.Run(func() error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkExecuteParallel is BenchmarkExecute from GOMAXPROCS goroutines
// at once on one breaker.
func BenchmarkExecuteParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("cbdash", func(b *testing.B) {
		cb := newCbdash(b)
		b.ReportAllocs()
		measured(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := cb.Execute(ctx, ok); err != nil {
						b.Error(err)
					}
				}
			})
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		b.ReportAllocs()
		measured(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cb.Execute(func() (any, error) { return nil, nil }); err != nil {
						b.Error(err)
					}
				}
			})
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		ex := newFailsafe()
		b.ReportAllocs()
		measured(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := ex.Run(func() error { return nil }); err != nil {
						b.Error(err)
					}
				}
			})
		})
	})
}

// BenchmarkReject is one call rejected by an open breaker.
func BenchmarkReject(b *testing.B) {
	ctx := context.Background()
	b.Run("cbdash", func(b *testing.B) {
		cb := newCbdash(b)
		if _, err := cb.Apply(breaker.Command{Action: breaker.ActionReset}); err != nil {
			b.Fatal(err)
		}
		for range 100 {
			_ = cb.Execute(ctx, func(context.Context) error { return errDown })
		}
		if cb.State() != breaker.Open {
			b.Fatal("not open")
		}
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if err := cb.Execute(ctx, ok); !errors.Is(err, breaker.ErrOpen) {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		for range 100 {
			_, _ = cb.Execute(func() (any, error) { return nil, errDown })
		}
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if _, err := cb.Execute(func() (any, error) { return nil, nil }); !errors.Is(err, gobreaker.ErrOpenState) {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		ex := newFailsafe()
		for range 100 {
			_ = ex.Run(func() error { return errDown })
		}
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if err := ex.Run(func() error { return nil }); !errors.Is(err, circuitbreaker.ErrOpen) {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkCbdashConfigs is a successful call through cbdash with each
// setting that changes the hot path: a time window (a short lock per
// call), slow-call detection (still lock-free while calls are fast), a
// call timeout (a timer and a derived context per call) and a bulkhead
// (one shared in-flight counter).
func BenchmarkCbdashConfigs(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cfg  breaker.Config
	}{
		{"count", breaker.Config{}},
		{"time", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: 10 * time.Second}}},
		{"slow", breaker.Config{SlowCallDuration: time.Second}},
		{"timeout", breaker.Config{CallTimeout: time.Second}},
		{"bulkhead", breaker.Config{MaxConcurrent: 100}},
		{"ramp-configured", breaker.Config{RampDuration: 20 * time.Second}}, // configured, not ramping: costs nothing
	} {
		b.Run(c.name, func(b *testing.B) {
			cb, err := breaker.New("bench", c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			measured(b, func() {
				for b.Loop() {
					if err := cb.Execute(ctx, ok); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkRamp compares, on one virtual clock standing still, a closed
// breaker with no ramp and one ramping up after a recovery at a share of
// 0.999999 (so that nearly every call is admitted and the figures compare
// admitted calls): the ramp's cost while it lasts, one atomic load and
// one atomic add.
func BenchmarkRamp(b *testing.B) {
	ctx := context.Background()
	for _, ramping := range []bool{false, true} {
		name := "off"
		if ramping {
			name = "ramping"
		}
		b.Run(name, func(b *testing.B) {
			clk := breakertest.NewEpochClock()
			cfg := breaker.Config{MinimumCalls: 1, OpenDuration: time.Second, Clock: clk}
			if ramping {
				cfg.RampDuration = 1000 * time.Second
			}
			cb, err := breaker.New("bench", cfg)
			if err != nil {
				b.Fatal(err)
			}
			_ = cb.Execute(ctx, func(context.Context) error { return errDown })
			clk.Advance(time.Second)
			if err := cb.Execute(ctx, ok); err != nil { // the probe closes it
				b.Fatal(err)
			}
			clk.Advance(999999 * time.Millisecond)
			b.ReportAllocs()
			measured(b, func() {
				for b.Loop() {
					_ = cb.Execute(ctx, ok)
				}
			})
			if s := cb.Snapshot(); ramping && s.RampShare == 1 {
				b.Fatal("not ramping")
			}
		})
	}
}

// BenchmarkShadows is one successful call through a closed breaker with
// 0, 1 and 3 shadow configurations (breaker.Config.Shadows: each fed the
// call's outcome, never enforced), beside gobreaker in the same run. The
// shadows are the same kind of breaker (a count window of 100 calls) with
// other thresholds. The bound: at most 15 ns and no allocation
// per call per shadow.
func BenchmarkShadows(b *testing.B) {
	ctx := context.Background()
	shadows := []breaker.Shadow{
		{Name: "tight", Config: breaker.Config{FailureRateThreshold: 20}},
		{Name: "loose", Config: breaker.Config{FailureRateThreshold: 80, MinimumCalls: 50}},
		{Name: "short", Config: breaker.Config{Window: breaker.Window{Size: 20}, OpenDuration: 10 * time.Second}},
	}
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprintf("cbdash-%d", n), func(b *testing.B) {
			cb, err := breaker.New("bench", breaker.Config{Shadows: shadows[:n]})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			measured(b, func() {
				for b.Loop() {
					if err := cb.Execute(ctx, ok); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
	b.Run("gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		b.ReportAllocs()
		measured(b, func() {
			for b.Loop() {
				if _, err := cb.Execute(func() (any, error) { return nil, nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
