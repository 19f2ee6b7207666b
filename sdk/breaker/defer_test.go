package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// deferred returns a breaker (minimum calls 2, open 5 s) tripped open on
// clk, and a function applying defer_probes with a TTL.
func deferred(t *testing.T, clk *breakertest.Clock) (*breaker.Breaker, func(time.Duration) breaker.State) {
	t.Helper()
	b := mustNew(t, "payments", breaker.Config{MinimumCalls: 2, OpenDuration: 5 * time.Second, Clock: clk})
	for range 2 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	}
	if s := b.State(); s != breaker.Open {
		t.Fatalf("state %v after two failures, want open", s)
	}
	return b, func(ttl time.Duration) breaker.State {
		t.Helper()
		s, err := b.Apply(breaker.Command{ID: "c", Action: breaker.ActionDeferProbes, TTL: ttl, Actor: "cbdash (quorum)"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestDeferProbesHoldsOpenPastTheOpenDurationUntilItsTTL(t *testing.T) {
	clk := breakertest.NewEpochClock()
	b, deferFor := deferred(t, clk)
	gen := b.Snapshot().Generation
	if s := deferFor(20 * time.Second); s != breaker.Open {
		t.Fatalf("defer_probes left %v, want open", s)
	}
	if g := b.Snapshot().Generation; g != gen {
		t.Errorf("defer_probes made a transition: generation %d, was %d", g, gen)
	}
	clk.Advance(10 * time.Second) // past the 5 s open duration
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("call 10 s into a 20 s deferral: %v, want ErrOpen (no probe)", err)
	}
	if got, want := b.Snapshot().ProbesDeferredUntil, breakertest.Epoch().Add(20*time.Second); !got.Equal(want) {
		t.Errorf("ProbesDeferredUntil %v, want %v", got, want)
	}
	clk.Advance(10 * time.Second) // the time box ends: never waits forever
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("state at the deferral's end: %v, want half_open", s)
	}
}

func TestDeferProbesEndedEarlyProbesAtOnceAndAFailedProbeStaysDeferred(t *testing.T) {
	clk := breakertest.NewEpochClock()
	var halfOpenAt []time.Time
	b, deferFor := deferred(t, clk)
	b.Subscribe(func(tr breaker.Transition) {
		if tr.To == breaker.HalfOpen {
			halfOpenAt = append(halfOpenAt, tr.At)
		}
	})
	deferFor(time.Minute)
	clk.Advance(2 * time.Second)
	if s := deferFor(0); s != breaker.Open { // released before its own open duration ran out
		t.Fatalf("released 2 s in: %v, want open until its 5 s", s)
	}
	clk.Advance(2 * time.Second)
	deferFor(time.Minute) // 4 s in: held again
	clk.Advance(3 * time.Second)
	if s := b.State(); s != breaker.Open {
		t.Fatalf("held, 7 s in: %v, want open past its open duration", s)
	}
	clk.Advance(time.Second)
	if s := deferFor(0); s != breaker.HalfOpen { // 8 s in: released, its open duration long past
		t.Fatalf("released 8 s in: %v, want half_open at once", s)
	}
	if len(halfOpenAt) != 1 || !halfOpenAt[0].Equal(breakertest.Epoch().Add(8*time.Second)) {
		t.Fatalf("half-open at %v, want once at 8 s (the release)", halfOpenAt)
	}
	deferFor(30 * time.Second) // held while probing: the failed probe's open lasts until then
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("still down") })
	clk.Advance(10 * time.Second)
	if s := b.State(); s != breaker.Open {
		t.Fatalf("10 s after a failed probe under a 30 s deferral: %v, want open", s)
	}
	clk.Advance(20 * time.Second)
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("at the deferral's end: %v, want half_open", s)
	}
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("after a good probe: %v, want closed", s)
	}
	if d := b.Snapshot().ProbesDeferredUntil; !d.IsZero() {
		t.Errorf("closed, still deferred until %v", d)
	}
}

func TestDeferProbesIsIgnoredWhenClosed(t *testing.T) {
	clk := breakertest.NewEpochClock()
	b := mustNew(t, "payments", breaker.Config{MinimumCalls: 2, OpenDuration: 5 * time.Second, Clock: clk})
	if s, err := b.Apply(breaker.Command{Action: breaker.ActionDeferProbes, TTL: time.Minute}); err != nil || s != breaker.Closed {
		t.Fatalf("defer_probes on closed: %v, %v", s, err)
	}
	for range 2 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	}
	clk.Advance(5 * time.Second)
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("a deferral sent while closed held a later open: %v", s)
	}
	if _, err := b.Apply(breaker.Command{Action: breaker.ActionDeferProbes, TTL: -time.Second}); !errors.Is(err, breaker.ErrInvalidCommand) {
		t.Fatalf("negative TTL: %v", err)
	}
}
