package breaker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// shadowFixture is a breaker on a virtual clock with shadows, recording
// its live and its shadow transitions apart.
type shadowFixture struct {
	clk          *breakertest.Clock
	b            *breaker.Breaker
	mu           sync.Mutex
	live, shadow []breaker.Transition
}

func newShadowFixture(t *testing.T, cfg breaker.Config) *shadowFixture {
	t.Helper()
	f := &shadowFixture{clk: breakertest.NewClock(t0)}
	cfg.Clock = f.clk
	f.b = mustNew(t, "dep", cfg)
	f.b.Subscribe(func(tr breaker.Transition) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.live = append(f.live, tr)
	})
	f.b.SubscribeShadows(func(tr breaker.Transition) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.shadow = append(f.shadow, tr)
	})
	return f
}

var errDep = errors.New("dependency down")

// calls makes n calls, each ending with err after d of virtual time.
func (f *shadowFixture) calls(t *testing.T, n int, d time.Duration, err error) {
	t.Helper()
	for range n {
		got := f.b.Execute(context.Background(), func(context.Context) error {
			f.clk.Advance(d)
			return err
		})
		if errors.Is(got, breaker.ErrRejected) {
			t.Fatalf("the live breaker rejected a call: %v", got)
		}
	}
}

func (f *shadowFixture) shadows() []breaker.Transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]breaker.Transition(nil), f.shadow...)
}

// tight is a shadow that trips at 20 % failures over 10 calls, open 10 s.
var tight = breaker.Shadow{Name: "tight", Config: breaker.Config{
	Window: breaker.Window{Size: 10}, MinimumCalls: 10, FailureRateThreshold: 20, OpenDuration: 10 * time.Second,
}}

// A shadow with a lower threshold trips on a failure rate the live
// breaker lets through; the live breaker never rejects because of it,
// and its transition goes to SubscribeShadows only, named.
func TestShadowTripsWhileLiveDoesNot(t *testing.T) {
	f := newShadowFixture(t, breaker.Config{
		Window: breaker.Window{Size: 10}, MinimumCalls: 10, FailureRateThreshold: 50,
		Shadows: []breaker.Shadow{tight},
	})
	f.calls(t, 7, time.Millisecond, nil)
	f.calls(t, 3, time.Millisecond, errDep) // 30 %: the shadow trips, the live breaker does not
	f.calls(t, 20, time.Millisecond, nil)   // all admitted: the shadow rejects nothing
	if len(f.live) != 0 {
		t.Fatalf("live transitions: %+v", f.live)
	}
	sh := f.shadows()
	if len(sh) != 1 {
		t.Fatalf("shadow transitions: %+v", sh)
	}
	tr := sh[0]
	if tr.Shadow != "tight" || tr.Breaker != "dep" || tr.From != breaker.Closed || tr.To != breaker.Open ||
		tr.Cause.Kind != breaker.CauseFailureRate || tr.Cause.FailureRate != 30 || tr.Cause.Threshold != 20 {
		t.Fatalf("shadow transition: %+v", tr)
	}
	if want := t0.Add(10 * time.Millisecond); !tr.At.Equal(want) {
		t.Fatalf("shadow tripped at %v, want %v (the tenth call's end)", tr.At, want)
	}
	if s := f.b.Snapshot(); s.State != breaker.Closed || s.Totals.Rejected() != 0 || s.Totals.Admitted != 30 {
		t.Fatalf("live snapshot: %+v", s)
	}
	if s, ok := f.b.ShadowSnapshot("tight"); !ok || s.State != breaker.Open {
		t.Fatalf("shadow snapshot: %v %+v", ok, s)
	}
	if _, ok := f.b.ShadowSnapshot("nope"); ok {
		t.Fatal("an unknown shadow was found")
	}
}

// While its own state is open, a shadow does not count the outcomes (it
// would have rejected those calls); after its open duration it is
// half-open and the next calls are its probes: a failed probe opens it
// again, a successful one closes it with an empty window.
func TestShadowHalfOpenProbes(t *testing.T) {
	// The live breaker judges 100 calls: it never trips in this test.
	f := newShadowFixture(t, breaker.Config{MinimumCalls: 100, Shadows: []breaker.Shadow{tight}})
	f.calls(t, 10, time.Millisecond, errDep)     // the shadow trips at the tenth
	f.calls(t, 50, 100*time.Millisecond, errDep) // 5 s: open, not counted
	if n := len(f.shadows()); n != 1 {
		t.Fatalf("%d shadow transitions while open: %+v", n, f.shadows())
	}
	f.clk.Advance(5 * time.Second)          // its 10 s have passed
	f.calls(t, 1, time.Millisecond, errDep) // a failed probe
	f.clk.Advance(10 * time.Second)
	f.calls(t, 1, time.Millisecond, nil) // a successful probe
	var got []string
	for _, tr := range f.shadows() {
		got = append(got, tr.From.String()+">"+tr.To.String()+":"+string(tr.Cause.Kind))
	}
	exp := []string{
		"closed>open:failure_rate", "open>half_open:open_elapsed", "half_open>open:probe_failed",
		"open>half_open:open_elapsed", "half_open>closed:probes_succeeded",
	}
	if strings.Join(got, " ") != strings.Join(exp, " ") {
		t.Fatalf("shadow transitions:\n got %v\nwant %v", got, exp)
	}
	sh := f.shadows()
	if trip := sh[0].At; !sh[1].At.Equal(trip.Add(10 * time.Second)) {
		t.Fatalf("half-open at %v, want its open duration after the trip at %v", sh[1].At, trip)
	}
	if s, _ := f.b.ShadowSnapshot("tight"); s.State != breaker.Closed || s.Window.Calls != 0 {
		t.Fatalf("shadow after its probe: %+v", s)
	}
	if len(f.live) != 0 {
		t.Fatalf("live transitions: %+v", f.live)
	}
}

// A shadow's would-be open never makes the live breaker reject, and an
// operator's hold of the live breaker does not touch the shadow.
func TestShadowNeverDecidesLive(t *testing.T) {
	f := newShadowFixture(t, breaker.Config{MinimumCalls: 100, Shadows: []breaker.Shadow{tight}})
	f.calls(t, 10, time.Millisecond, errDep)
	if s, _ := f.b.ShadowSnapshot("tight"); s.State != breaker.Open {
		t.Fatalf("shadow: %v", s.State)
	}
	for range 100 {
		c, err := f.b.Allow()
		if err != nil {
			t.Fatalf("Allow with an open shadow: %v", err)
		}
		c.Done(nil)
	}
	if _, err := f.b.Apply(breaker.Command{ID: "c1", Action: breaker.ActionForceOpen}); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.b.ShadowSnapshot("tight"); s.State != breaker.Open {
		t.Fatalf("the live hold moved the shadow: %v", s.State)
	}
	for _, tr := range f.shadows() {
		if tr.Cause.Kind == breaker.CauseCommand {
			t.Fatalf("a command reached the shadow: %+v", tr)
		}
	}
}

// A shadow judges durations by its own settings: a call slower than its
// SlowCallDuration is slow for it, and one that ran its CallTimeout is a
// timeout for it, while the live breaker (no slow detection) records
// successes.
func TestShadowOwnSlowAndTimeout(t *testing.T) {
	f := newShadowFixture(t, breaker.Config{Shadows: []breaker.Shadow{
		{Name: "slow", Config: breaker.Config{MinimumCalls: 5, SlowCallDuration: 100 * time.Millisecond, SlowCallRateThreshold: 60}},
		{Name: "timeout", Config: breaker.Config{MinimumCalls: 5, CallTimeout: 200 * time.Millisecond}},
	}})
	f.calls(t, 5, 250*time.Millisecond, nil)
	kinds := map[string]breaker.CauseKind{}
	for _, tr := range f.shadows() {
		kinds[tr.Shadow] = tr.Cause.Kind
	}
	if kinds["slow"] != breaker.CauseSlowCallRate || kinds["timeout"] != breaker.CauseFailureRate {
		t.Fatalf("shadow trips: %v", kinds)
	}
	if s := f.b.Snapshot(); s.State != breaker.Closed || s.Totals.Successes != 5 {
		t.Fatalf("live: %+v", s)
	}
}

// Ignored and canceled outcomes are not recorded by a shadow either.
func TestShadowIgnoresIgnored(t *testing.T) {
	f := newShadowFixture(t, breaker.Config{
		Classify: func(error) breaker.Outcome { return breaker.Ignored },
		Shadows:  []breaker.Shadow{tight},
	})
	f.calls(t, 30, time.Millisecond, errDep)
	if s, _ := f.b.ShadowSnapshot("tight"); s.State != breaker.Closed || s.Window.Calls != 0 {
		t.Fatalf("shadow: %+v", s)
	}
}

// A panicking shadow observer, and a Logger that panics while it logs
// that panic, never reach the call; the live breaker goes on.
func TestShadowObserverPanicDoesNotEscape(t *testing.T) {
	clk := breakertest.NewClock(t0)
	b := mustNew(t, "dep", breaker.Config{
		Clock: clk, MinimumCalls: 100, Shadows: []breaker.Shadow{tight},
		Logger: slog.New(panicHandler{slog.DiscardHandler}), // panics while logging the observer's panic
	})
	got := make(chan breaker.Transition, 8) // subscribed first: told before the panicking observer
	b.SubscribeShadows(func(tr breaker.Transition) { got <- tr })
	b.SubscribeShadows(func(breaker.Transition) { panic("observer") })
	for range 30 {
		if err := b.Execute(context.Background(), func(context.Context) error { clk.Advance(time.Millisecond); return errDep }); !errors.Is(err, errDep) {
			t.Fatalf("call: %v", err)
		}
	}
	if s, _ := b.ShadowSnapshot("tight"); s.State != breaker.Open {
		t.Fatalf("shadow: %v", s.State)
	}
	if tr := <-got; tr.To != breaker.Open {
		t.Fatalf("first shadow transition: %+v", tr)
	}
	// The next transitions are still delivered.
	clk.Advance(10 * time.Second)
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	if tr := <-got; tr.To != breaker.HalfOpen {
		t.Fatalf("next shadow transition: %+v", tr)
	}
}

func TestShadowValidation(t *testing.T) {
	ok := breaker.Config{}
	cases := []struct {
		name    string
		shadows []breaker.Shadow
		want    string
	}{
		{"too many", []breaker.Shadow{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}, "Shadows has 4 entries (at most 3)"},
		{"no name", []breaker.Shadow{{Config: ok}}, "Shadows[0].Name is required"},
		{"twice", []breaker.Shadow{{Name: "a"}, {Name: "a"}}, `Shadows[1].Name "a" is used twice`},
		{"long", []breaker.Shadow{{Name: strings.Repeat("x", 129)}}, "Shadows[0].Name is longer than 128 bytes"},
		{"bad config", []breaker.Shadow{{Name: "a", Config: breaker.Config{FailureRateThreshold: 120}}}, `FailureRateThreshold must be within (0, 100] percent (got 120) (in Shadows[0] "a")`},
		{"clock", []breaker.Shadow{{Name: "a", Config: breaker.Config{Clock: breakertest.NewClock(t0)}}}, "Clock, Classify and Logger must be nil"},
		{"nested", []breaker.Shadow{{Name: "a", Config: breaker.Config{Shadows: []breaker.Shadow{{Name: "b"}}}}}, "a shadow cannot have shadows"},
		{"bulkhead", []breaker.Shadow{{Name: "a", Config: breaker.Config{MaxConcurrent: 3}}}, "MaxConcurrent must be 0"},
	}
	for _, c := range cases {
		_, err := breaker.New("dep", breaker.Config{Shadows: c.shadows})
		if !errors.Is(err, breaker.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrInvalidConfig saying %q", c.name, err, c.want)
		}
	}
	b := mustNew(t, "dep", breaker.Config{Shadows: []breaker.Shadow{{Name: "a"}, {Name: "b", Config: breaker.Config{FailureRateThreshold: 20}}}})
	got := b.Config().Shadows
	if len(got) != 2 || got[0].Config.FailureRateThreshold != 50 || got[1].Config.FailureRateThreshold != 20 || got[1].Config.MinimumCalls != 10 {
		t.Fatalf("shadows with defaults: %+v", got)
	}
	if _, err := breaker.New("again", b.Config()); err != nil { // a breaker's Config makes another
		t.Fatalf("New with a breaker's own Config: %v", err)
	}
}

// Shadows cost no allocation on the call path.
func TestShadowHotPathAllocatesNothing(t *testing.T) {
	b := mustNew(t, "alloc", breaker.Config{Shadows: []breaker.Shadow{{Name: "a"}, {Name: "b"}, {Name: "c", Config: breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: time.Second}}}}})
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { _ = b.Execute(ctx, ok) }); n != 0 {
		t.Errorf("Execute with 3 shadows: %v allocs per call", n)
	}
}
