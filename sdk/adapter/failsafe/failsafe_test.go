package failsafe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	cbfailsafe "github.com/cbdash/cbdash/sdk/adapter/failsafe"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

var errBoom = errors.New("boom")

type recorder struct{ ts []breaker.Transition }

func (r *recorder) observe(t breaker.Transition) { r.ts = append(r.ts, t) }

func (r *recorder) list() []string {
	var out []string
	for _, t := range r.ts {
		out = append(out, t.From.String()+">"+t.To.String()+":"+string(t.Cause.Kind))
	}
	return out
}

// newBreaker opens after 3 failures of the last 4 calls, half-opens at
// the next call (a zero delay: failsafe-go runs on the system clock and
// cannot be given another) and closes after 2 successful probes.
func newBreaker(t *testing.T, clk *breakertest.Clock, user func(circuitbreaker.StateChangedEvent)) (*cbfailsafe.CircuitBreaker[int], *recorder) {
	t.Helper()
	b := circuitbreaker.NewBuilder[int]().WithFailureThresholdRatio(3, 4).WithSuccessThreshold(2).WithDelay(0)
	cb := cbfailsafe.New("payments", b, cbfailsafe.Options{Clock: clk, OnStateChanged: user})
	rec := &recorder{}
	t.Cleanup(cb.Subscribe(rec.observe))
	return cb, rec
}

func TestTransitionsAndCountsFollowFailsafe(t *testing.T) {
	clk := breakertest.NewEpochClock()
	var user []string
	cb, rec := newBreaker(t, clk, func(e circuitbreaker.StateChangedEvent) { user = append(user, e.NewState.String()) })
	ctx := context.Background()
	call := func(err error) error {
		_, e := cb.Get(ctx, func(context.Context) (int, error) { clk.Advance(12 * time.Millisecond); return 1, err })
		return e
	}
	for _, err := range []error{nil, errBoom, errBoom, errBoom} {
		_ = call(err)
	}
	if s := cb.Snapshot(); s.State != breaker.Open {
		t.Fatalf("after 3 of 4 failures: %v", s.State)
	}
	_ = call(nil) // half-opens (delay 0) and is the first probe
	_ = call(nil) // second probe closes it
	want := []string{"closed>open:failure_rate", "open>half_open:open_elapsed", "half_open>closed:probes_succeeded"}
	if got := rec.list(); !equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
	if c := rec.ts[0].Cause; c.FailureRate != 75 || c.Threshold != 75 || c.Window.Calls != 4 || c.Window.Failures != 3 {
		t.Errorf("trip cause = %+v", c)
	}
	if !equal(user, []string{"open", "half-open", "closed"}) {
		t.Errorf("the user's listener saw %v", user)
	}
	s := cb.Snapshot()
	if w := (breaker.Totals{Admitted: 6, Successes: 3, Failures: 3, Errors: 3}); s.Totals != w || s.Latency[4] != 6 {
		t.Errorf("snapshot = %+v, want totals %+v and 6 calls <= 25 ms", s, w)
	}
	cfg := cb.Describe()
	if cfg.Library != cbfailsafe.Library || cfg.FailureRateThreshold != 75 || cfg.WindowSize != 4 || cfg.HalfOpenSuccessThreshold != 2 ||
		cfg.Settings.String() != "Delay=0s, FailureThreshold=3, FailureThresholdingCapacity=4, SuccessThreshold=2, SuccessThresholdingCapacity=2" {
		t.Errorf("config = %+v (settings %v)", cfg, cfg.Settings)
	}
}

func TestAForceOpenHoldRejectsUntilReleasedAndATTLEndsIt(t *testing.T) {
	clk := breakertest.NewEpochClock()
	cb, rec := newBreaker(t, clk, nil)
	ctx := context.Background()
	run := func() error { return cb.Run(ctx, func(context.Context) error { return nil }) }

	st, err := cb.Apply(breaker.Command{ID: "c1", Action: breaker.ActionForceOpen, TTL: time.Minute, Actor: "ops"})
	if err != nil || st != breaker.ForcedOpen {
		t.Fatalf("force_open = %v, %v", st, err)
	}
	for range 3 {
		if err := run(); !errors.Is(err, cbfailsafe.ErrHeldOpen) || !errors.Is(err, circuitbreaker.ErrOpen) {
			t.Fatalf("call while held open: %v", err)
		}
	}
	if !cb.Breaker().IsOpen() {
		t.Error("the failsafe-go breaker itself is not open")
	}
	s := cb.Snapshot()
	if s.State != breaker.ForcedOpen || s.Totals.RejectedForcedOpen != 3 || !s.ForcedUntil.Equal(clk.Now().Add(time.Minute)) || s.Forced.ID != "c1" {
		t.Errorf("snapshot while held = %+v", s)
	}
	if st, _ := cb.Apply(breaker.Command{ID: "c2", Action: breaker.ActionRelease}); st != breaker.Closed {
		t.Fatalf("release = %v", st)
	}
	if err := run(); err != nil {
		t.Fatalf("after release: %v", err)
	}
	_, _ = cb.Apply(breaker.Command{ID: "c3", Action: breaker.ActionForceClosed, TTL: time.Second})
	for range 5 { // would trip it, but a force-closed breaker does not judge calls
		_ = cb.Run(ctx, func(context.Context) error { return errBoom })
	}
	clk.Advance(time.Second)
	if s := cb.Snapshot(); s.State != breaker.Closed {
		t.Errorf("after the TTL: %v", s.State)
	}
	want := []string{"closed>forced_open:command", "forced_open>closed:command", "closed>forced_closed:command", "forced_closed>closed:expired"}
	if got := rec.list(); !equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
	if c := rec.ts[0].Cause; c.Command.ID != "c1" || c.Command.Actor != "ops" || !c.ExpiresAt.Equal(rec.ts[0].At.Add(time.Minute)) {
		t.Errorf("force_open cause = %+v", c)
	}
	if _, err := cb.Apply(breaker.Command{Action: "ajar"}); !errors.Is(err, breaker.ErrInvalidCommand) {
		t.Errorf("unknown action: %v", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
