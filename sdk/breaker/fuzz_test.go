package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// fuzzCall is a call the fuzzer began and has not ended.
type fuzzCall struct {
	c     breaker.Call
	gen   uint64 // generation it was admitted in
	probe bool   // admitted while half-open
	start time.Time
}

// FuzzBreaker builds a breaker from the first bytes and plays the rest as
// a sequence of calls, clock moves and commands, checking after each step
// that counts are never negative and add up, the window never holds more
// calls than its size, no more probes than allowed are in flight, every
// rejection matches the state, and the transitions form one chain.
func FuzzBreaker(f *testing.F) {
	f.Add([]byte{4, 4, 50, 0, 1, 1, 0, 0, 0, 3, 1, 3, 1, 3, 1, 3, 1, 2, 200, 0, 0, 0, 1, 0, 1})
	f.Add([]byte{3, 2, 100, 1, 2, 2, 1, 1, 4, 0, 0, 0, 0, 0, 0, 1, 2, 1, 2, 2, 255, 0, 0, 0, 1, 0, 2, 4, 1})
	f.Add([]byte{130, 5, 30, 3, 3, 2, 2, 0, 0, 5, 3, 7, 3, 2, 2, 60, 4, 0, 0, 1, 3, 5, 5, 2, 40, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := fuzzBreaker(data); err != nil {
			t.Fatal(err)
		}
	})
}

func fuzzBreaker(data []byte) error {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		v := int(data[0])
		data = data[1:]
		return v
	}
	clk := breakertest.NewClock(t0)
	cfg := breaker.Config{Clock: clk}
	w := next()
	if w&128 != 0 {
		n := w%10 + 1
		cfg.Window = breaker.Window{Kind: breaker.TimeWindow, Duration: time.Duration(n*(1+w%3)) * 50 * time.Millisecond, Buckets: n}
	} else {
		cfg.Window.Size = w%20 + 1
	}
	cfg.MinimumCalls = next()%10 + 1
	cfg.FailureRateThreshold = float64(next()%100 + 1)
	opts := next()
	if opts&1 != 0 {
		cfg.SlowCallDuration = 20 * time.Millisecond
		cfg.SlowCallRateThreshold = float64(opts%100 + 1)
	}
	if opts&2 != 0 {
		cfg.CallTimeout = 50 * time.Millisecond
	}
	if opts&4 != 0 {
		cfg.OpenBackoff = breaker.Backoff{Multiplier: 1.5, Max: time.Second}
	}
	cfg.OpenDuration = time.Duration(next()%10+1) * 20 * time.Millisecond
	cfg.HalfOpenMaxCalls = next()%4 + 1
	cfg.HalfOpenSuccessThreshold = next()%4 + 1
	cfg.MaxConcurrent = next() % 5
	b, err := breaker.New("fuzz", cfg)
	if err != nil {
		return err
	}
	var ch chain
	b.Subscribe(ch.observe)
	errs := []error{nil, errBoom, breaker.ErrTimeout, nil, breaker.Ignorable(errBoom), context.Canceled}

	var calls []fuzzCall
	var rejected uint64
	for step := 0; len(data) > 0; step++ {
		before := b.Snapshot()
		switch op := next() % 6; op {
		case 0: // begin
			if len(calls) >= 8 {
				break
			}
			c, err := b.Allow()
			if err != nil {
				rejected++
				if e := checkRejection(before.State, err, cfg.MaxConcurrent > 0); e != nil {
					return fmt.Errorf("step %d: %v", step, e)
				}
				if errors.Is(err, breaker.ErrBulkheadFull) && len(calls) < cfg.MaxConcurrent {
					return fmt.Errorf("step %d: bulkhead full with %d of %d in flight", step, len(calls), cfg.MaxConcurrent)
				}
				break
			}
			calls = append(calls, fuzzCall{c: c, gen: before.Generation, probe: before.State == breaker.HalfOpen, start: clk.Now()})
		case 1: // end
			if len(calls) == 0 {
				break
			}
			i := next() % len(calls)
			calls[i].c.Report(breaker.Outcome(next() % 6))
			calls = append(calls[:i], calls[i+1:]...)
		case 2: // time passes
			clk.Advance(time.Duration(next()) * time.Millisecond)
		case 3: // a whole call
			d := time.Duration(next()%64) * time.Millisecond
			e := errs[next()%len(errs)]
			err := b.Execute(context.Background(), func(context.Context) error {
				clk.Advance(d)
				return e
			})
			if errors.Is(err, breaker.ErrRejected) {
				rejected++
				if e := checkRejection(before.State, err, cfg.MaxConcurrent > 0); e != nil {
					return fmt.Errorf("step %d: %v", step, e)
				}
			}
		case 4: // a command
			acts := []breaker.Action{breaker.ActionForceOpen, breaker.ActionForceClosed, breaker.ActionRelease, breaker.ActionReset}
			a := acts[next()%len(acts)]
			if _, err := b.Apply(breaker.Command{Action: a, TTL: time.Duration(next()%4) * 100 * time.Millisecond}); err != nil {
				return err
			}
		case 5:
			_ = b.State()
		}

		// Calls past their deadline were ended by the breaker.
		live := calls[:0]
		for _, c := range calls {
			if cfg.CallTimeout == 0 || clk.Now().Before(c.start.Add(cfg.CallTimeout)) {
				live = append(live, c)
			}
		}
		calls = live
		s := b.Snapshot()
		if s.Generation < before.Generation {
			return fmt.Errorf("step %d: generation went back from %d to %d", step, before.Generation, s.Generation)
		}
		if err := checkTotals(s); err != nil {
			return fmt.Errorf("step %d: %v", step, err)
		}
		if s.InFlight != int64(len(calls)) {
			return fmt.Errorf("step %d: %d in flight, the fuzzer holds %d", step, s.InFlight, len(calls))
		}
		if s.Totals.Rejected() != rejected {
			return fmt.Errorf("step %d: %d rejections counted, %d seen", step, s.Totals.Rejected(), rejected)
		}
		if cfg.Window.Kind == breaker.CountWindow && s.Window.Calls > int64(cfg.Window.Size) {
			return fmt.Errorf("step %d: window holds %d calls, size %d", step, s.Window.Calls, cfg.Window.Size)
		}
		if s.State == breaker.HalfOpen {
			probes := 0
			for _, c := range calls {
				if c.probe && c.gen == s.Generation {
					probes++
				}
			}
			if probes > cfg.HalfOpenMaxCalls {
				return fmt.Errorf("step %d: %d probes in flight, at most %d allowed", step, probes, cfg.HalfOpenMaxCalls)
			}
		}
		if s.State == breaker.Closed && s.Window.Calls >= int64(cfg.MinimumCalls) && s.Window.FailureRate >= cfg.FailureRateThreshold && cfg.Window.Kind == breaker.CountWindow {
			return fmt.Errorf("step %d: closed with window %+v at or over the threshold", step, s.Window)
		}
		if _, _, _, err := ch.check(); err != nil {
			return fmt.Errorf("step %d: %v", step, err)
		}
	}
	if last, n, _, _ := ch.check(); n > 0 && last != b.State() {
		return fmt.Errorf("state %v, last transition to %v", b.State(), last)
	}
	return nil
}
