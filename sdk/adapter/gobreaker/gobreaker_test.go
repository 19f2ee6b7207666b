package gobreaker_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	cbgobreaker "github.com/cbdash/cbdash/sdk/adapter/gobreaker"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/sony/gobreaker/v2"
)

var errBoom = errors.New("boom")

// settings trip after 3 consecutive failures and half-open after
// openFor of gobreaker's own clock. gobreaker reads the system clock and
// cannot be given another, so the tests wait that out by polling its
// state (long enough to see a rejection first on a loaded machine).
func settings(name string, hooked *[]string) gobreaker.Settings {
	return gobreaker.Settings{
		Name: name, MaxRequests: 2, Timeout: openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
		IsExcluded:  func(err error) bool { return errors.Is(err, errIgnored) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			*hooked = append(*hooked, from.String()+">"+to.String())
		},
	}
}

var errIgnored = errors.New("not the dependency's fault")

const openFor = 250 * time.Millisecond

// halfOpen waits until gobreaker, asked for its state, has moved from
// open to half-open (its timeout is 1 ns of the system clock).
func halfOpen(t *testing.T, state func() gobreaker.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for state() != gobreaker.StateHalfOpen {
		runtime.Gosched()
		if time.Now().After(deadline) {
			t.Fatal("gobreaker did not half-open")
		}
	}
}

type recorder struct{ ts []breaker.Transition }

func (r *recorder) observe(t breaker.Transition) { r.ts = append(r.ts, t) }

func TestCircuitBreakerReportsEveryTransitionAndExactCounts(t *testing.T) {
	clk := breakertest.NewEpochClock()
	var hooked []string
	cb := cbgobreaker.NewCircuitBreaker[int](settings("search", &hooked), cbgobreaker.Options{Clock: clk})
	var rec recorder
	defer cb.Subscribe(rec.observe)()

	call := func(err error, took time.Duration) error {
		_, e := cb.Execute(func() (int, error) { clk.Advance(took); return 1, err })
		return e
	}
	_ = call(nil, 3*time.Millisecond)
	_ = call(errIgnored, time.Millisecond)
	for range 3 {
		_ = call(errBoom, 40*time.Millisecond)
	}
	if err := call(nil, 0); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("call while open: err = %v", err)
	}
	halfOpen(t, cb.Breaker().State)
	_ = call(nil, 2*time.Millisecond) // first of two probes
	_ = call(nil, 2*time.Millisecond) // closes it
	func() {
		defer func() { _ = recover() }()
		_ = call(nil, 0)
		_, _ = cb.Execute(func() (int, error) { panic("boom") })
	}()

	var got []string
	for _, tr := range rec.ts {
		got = append(got, tr.From.String()+">"+tr.To.String()+":"+string(tr.Cause.Kind))
	}
	want := []string{"closed>open:library_rule", "open>half_open:open_elapsed", "half_open>closed:probes_succeeded"}
	if !equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
	if !equal(hooked, []string{"closed>open", "open>half-open", "half-open>closed"}) {
		t.Errorf("the Settings' own OnStateChange saw %v", hooked)
	}
	if c := rec.ts[0].Cause; c.Window.Calls != 4 || c.Window.Failures != 3 || rec.ts[0].OpenDuration != openFor {
		t.Errorf("trip cause = %+v (open %v), want the 4 counted calls and 3 failures ReadyToTrip saw", c, rec.ts[0].OpenDuration)
	}
	for i, tr := range rec.ts {
		if tr.Breaker != "search" || tr.Generation != uint64(i+1) {
			t.Errorf("transition %d = %+v", i, tr)
		}
	}
	s := cb.Snapshot()
	want2 := breaker.Totals{Admitted: 9, Successes: 4, Failures: 4, Errors: 3, Panics: 1, Ignored: 1, RejectedOpen: 1}
	if s.Totals != want2 || s.State != breaker.Closed || s.InFlight != 0 {
		t.Errorf("snapshot = %+v\nwant totals %+v", s, want2)
	}
	if s.Latency[0] != 2 || s.Latency[1] != 2 || s.Latency[2] != 1 || s.Latency[5] != 3 { // 0,0 | 2,2 | 3 | 40 x3
		t.Errorf("latency = %v", s.Latency)
	}
	cfg := cb.Describe()
	if cfg.Library != cbgobreaker.Library || cfg.HalfOpenMaxCalls != 2 || cfg.OpenDurationMillis != 250 ||
		cfg.Settings.String() != "BucketPeriod=0s, Interval=0s, IsExcluded=custom, IsSuccessful=err == nil, MaxRequests=2, ReadyToTrip=custom, Timeout=250ms" {
		t.Errorf("config = %+v (settings %v)", cfg, cfg.Settings)
	}
}

func TestTwoStepCircuitBreakerCountsAllowAndDone(t *testing.T) {
	clk := breakertest.NewEpochClock()
	var hooked []string
	cb := cbgobreaker.NewTwoStepCircuitBreaker[any](settings("ledger", &hooked), cbgobreaker.Options{Clock: clk})
	var rec recorder
	defer cb.Subscribe(rec.observe)()
	for range 3 {
		done, err := cb.Allow()
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(7 * time.Millisecond)
		done(errBoom)
		done(errBoom) // a second done is not counted again
	}
	if _, err := cb.Allow(); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("open: err = %v", err)
	}
	halfOpen(t, cb.Breaker().State)
	probe, err := cb.Allow()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = cb.Allow() // second probe, left in flight
	if _, err := cb.Allow(); !errors.Is(err, gobreaker.ErrTooManyRequests) {
		t.Fatalf("third probe: err = %v", err)
	}
	probe(errBoom)
	s := cb.Snapshot()
	want := breaker.Totals{Admitted: 5, Failures: 4, Errors: 4, RejectedOpen: 1, RejectedHalfOpenFull: 1}
	if s.Totals != want || s.InFlight != 1 || s.State != breaker.Open || s.Latency[3] != 3 {
		t.Errorf("snapshot = %+v\nwant totals %+v", s, want)
	}
	if n := len(rec.ts); n != 3 || rec.ts[2].Cause.Kind != breaker.CauseProbeFailed || rec.ts[2].Cause.ProbeOutcome != "error" {
		t.Errorf("transitions = %+v", rec.ts)
	}
	if got := rec.ts[0].Cause.Kind; string(got) != protocol.CauseLibraryRule {
		t.Errorf("trip cause = %q", got)
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
