package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// recovery is a dependency that is down for its first 60 s and then
// recovers linearly over 30 s: at t its capacity is C(t) = (t-60s)/30s of
// the full offered load (0 before 60 s, all of it from 90 s). A call
// fails with probability 1 - C/A, where A is the load admitted over the
// last second (at least one call): a lone probe gets through as soon as
// the dependency serves anything, the whole load only once it serves it
// all.
type recovery struct {
	rng      *rand.Rand
	load     float64   // offered calls a second
	admitted []float64 // seconds of the admitted calls of the last second
}

func (r *recovery) call(t float64) error {
	r.admitted = append(r.admitted, t)
	for len(r.admitted) > 0 && r.admitted[0] <= t-1 {
		r.admitted = r.admitted[1:]
	}
	capacity := min(max((t-60)/30, 0), 1) * r.load
	a := max(float64(len(r.admitted)), 1)
	if r.rng.Float64() < 1-capacity/a {
		return errors.New("overloaded")
	}
	return nil
}

// runRecovery offers 100 calls a second for 120 s of virtual time to a
// breaker (defaults but a 5 s open duration) with the given ramp and
// returns how often it re-tripped after its first closing (closed > open
// transitions after a half_open > closed) and the calls admitted in each
// second.
func runRecovery(t *testing.T, seed uint64, rampDur time.Duration) (retrips int, perSecond []int) {
	t.Helper()
	clk := breakertest.NewEpochClock()
	b := mustNew(t, "recovering", breaker.Config{OpenDuration: 5 * time.Second, RampDuration: rampDur, Clock: clk})
	closed := false
	cancel := b.Subscribe(func(tr breaker.Transition) {
		switch {
		case tr.From == breaker.HalfOpen && tr.To == breaker.Closed:
			closed = true
		case closed && tr.From == breaker.Closed && tr.To == breaker.Open:
			retrips++
		}
	})
	defer cancel()
	dep := &recovery{rng: rand.New(rand.NewPCG(seed, 35)), load: 100}
	ctx := context.Background()
	perSecond = make([]int, 120)
	for i := range 120 * 100 {
		now := float64(i) / 100
		err := b.Execute(ctx, func(context.Context) error { return dep.call(now) })
		if !errors.Is(err, breaker.ErrRejected) {
			perSecond[i/100]++
		}
		clk.Advance(10 * time.Millisecond)
	}
	return retrips, perSecond
}

// Issue 35's check of the ramp: against a dependency recovering linearly
// over 30 s, a straight close re-trips at least twice; a 20 s ramp
// re-trips never in 20 runs with different seeds, and the admitted load
// rises by at most 10 % of the offered load a second.
func TestRampAgainstALinearRecovery(t *testing.T) {
	t.Parallel()
	minStraight, maxStraight, maxRise := 1<<30, 0, 0
	for seed := range uint64(20) {
		straight, _ := runRecovery(t, seed, 0)
		if straight < 2 {
			t.Errorf("seed %d: a straight close re-tripped %d times, want at least 2", seed, straight)
		}
		minStraight, maxStraight = min(minStraight, straight), max(maxStraight, straight)
		n, per := runRecovery(t, seed, 20*time.Second)
		if n != 0 {
			t.Errorf("seed %d: a 20 s ramp re-tripped %d times, want 0", seed, n)
		}
		for s := 61; s < len(per); s++ {
			rise := per[s] - per[s-1]
			maxRise = max(maxRise, rise)
			if rise > 10 {
				t.Errorf("seed %d: admitted %d calls in second %d after %d: a rise of %d%% of the offered load, want <= 10%%", seed, per[s], s, per[s-1], rise)
			}
		}
		if per[len(per)-1] != 100 {
			t.Errorf("seed %d: %d calls admitted in the last second, want every one (100) once recovered", seed, per[len(per)-1])
		}
	}
	t.Logf("20 seeds: a straight close re-tripped %d to %d times; a 20 s ramp never, its admitted load rising by at most %d%% a second", minStraight, maxStraight, maxRise)
}

// A ramp's rejections are ErrRamp (matching ErrRejected), counted in
// Totals.RejectedRamp, served by the fallback, and visible in the
// snapshot while the ramp lasts.
func TestRampRejectionsAndSnapshot(t *testing.T) {
	clk := breakertest.NewEpochClock()
	b := mustNew(t, "ramp", breaker.Config{MinimumCalls: 1, OpenDuration: time.Second, RampDuration: 10 * time.Second, Clock: clk})
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("down") }
	ok := func(context.Context) error { return nil }
	_ = b.Execute(ctx, fail)
	clk.Advance(time.Second)
	if err := b.Execute(ctx, ok); err != nil { // the probe closes it
		t.Fatal(err)
	}
	err := b.Execute(ctx, ok)
	if !errors.Is(err, breaker.ErrRamp) || !errors.Is(err, breaker.ErrRejected) {
		t.Fatalf("first call after closing: %v, want ErrRamp", err)
	}
	served := false
	_ = b.ExecuteWithFallback(ctx, ok, func(_ context.Context, err error) error {
		served = errors.Is(err, breaker.ErrRamp)
		return nil
	})
	if !served {
		t.Error("the fallback did not serve a ramp rejection")
	}
	clk.Advance(2500 * time.Millisecond)
	s := b.Snapshot()
	if s.State != breaker.Closed || s.RampShare != 0.25 || !s.RampUntil.Equal(breakertest.Epoch().Add(11*time.Second)) {
		t.Errorf("snapshot state %v share %v until %v; want closed, 0.25, the closing + 10 s", s.State, s.RampShare, s.RampUntil)
	}
	if s.Totals.RejectedRamp != 2 || s.Totals.Rejected() != 2 {
		t.Errorf("totals %+v: want 2 ramp rejections", s.Totals)
	}
	clk.Advance(10 * time.Second)
	for range 5 {
		if err := b.Execute(ctx, ok); err != nil {
			t.Fatalf("after the ramp: %v", err)
		}
	}
	if s := b.Snapshot(); s.RampShare != 1 || !s.RampUntil.IsZero() {
		t.Errorf("after the ramp: share %v until %v, want 1 and zero", s.RampShare, s.RampUntil)
	}
}

// A ramp that is abandoned says so in the trip's cause.
func TestRampAbandonedCause(t *testing.T) {
	clk := breakertest.NewEpochClock()
	b := mustNew(t, "ramp", breaker.Config{MinimumCalls: 2, OpenDuration: time.Second, RampDuration: 10 * time.Second, Clock: clk})
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("down") }
	_ = b.Execute(ctx, fail)
	_ = b.Execute(ctx, fail)
	clk.Advance(time.Second)
	_ = b.Execute(ctx, func(context.Context) error { return nil })
	var last breaker.Transition
	b.Subscribe(func(tr breaker.Transition) { last = tr })
	clk.Advance(5 * time.Second) // share 0.5
	for range 4 {
		_ = b.Execute(ctx, fail)
	}
	if last.To != breaker.Open || last.Cause.Kind != breaker.CauseFailureRate || last.Cause.RampShare != 0.5 {
		t.Errorf("transition %+v: want a failure_rate trip with RampShare 0.5", last)
	}
}

func TestRampDurationMustNotBeNegative(t *testing.T) {
	if _, err := breaker.New("b", breaker.Config{RampDuration: -time.Second}); !errors.Is(err, breaker.ErrInvalidConfig) {
		t.Errorf("negative RampDuration: %v, want ErrInvalidConfig", err)
	}
}
