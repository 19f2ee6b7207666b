package demo

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// nowhere is a collector URL where nothing listens: the agents retry in
// the background, the fleet does not care.
const nowhere = "ws://127.0.0.1:1/api/v1/agent"

func testBreakerConfig() *breaker.Config {
	return &breaker.Config{
		Window:                   breaker.Window{Size: 10},
		MinimumCalls:             5,
		OpenDuration:             300 * time.Millisecond,
		HalfOpenSuccessThreshold: 2,
		CallTimeout:              time.Second,
	}
}

// startFleet starts a fleet on cfg. The fleet's traffic is real HTTP, so
// unless cfg has a clock it runs on one that starts at the test epoch and
// advances at real speed.
func startFleet(t *testing.T, cfg FleetConfig) *Fleet {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clocktest.NewRunning()
	}
	f, err := StartFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := f.Close(ctx); err != nil && !errors.Is(err, agent.ErrNotFlushed) {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// recorder keeps the transitions of breakers.
type recorder struct {
	mu sync.Mutex
	ts []breaker.Transition
}

func (r *recorder) watch(b *breaker.Breaker) func() {
	return b.Subscribe(func(t breaker.Transition) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ts = append(r.ts, t)
	})
}

func (r *recorder) has(to breaker.State, cause breaker.CauseKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.ts {
		if t.To == to && t.Cause.Kind == cause {
			return true
		}
	}
	return false
}

func (r *recorder) all() []breaker.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]breaker.Transition(nil), r.ts...)
}

func TestFleetBreakerOpensOnErrorsAndClosesOnRecovery(t *testing.T) {
	f := startFleet(t, FleetConfig{
		CollectorURL: nowhere,
		Script: Script{Phases: []Phase{
			{Name: "healthy", Duration: time.Second},
			{Name: "burst", Duration: time.Second, Fault: Fault{ErrorRate: 1}},
			{Name: "healthy", Duration: 3 * time.Second},
		}},
		Dependencies: []DependencySpec{{Name: "payments"}},
		Services:     []ServiceSpec{{Name: "checkout", Instances: 1, Dependencies: []string{"payments"}}},
		Rate:         100,
		Breaker:      testBreakerConfig(),
	})
	inst := f.Instances()[0]
	if inst.ID != "checkout-1" || len(inst.Breakers()) != 1 || inst.Breakers()[0].Name() != "payments" {
		t.Fatalf("instance %s with breakers %v, want checkout-1 with payments", inst.ID, inst.Breakers())
	}
	b := inst.Breakers()[0]
	var rec recorder
	defer rec.watch(b)()

	if !eventually.Wait(15*time.Second, func() bool {
		return rec.has(breaker.Open, breaker.CauseFailureRate) && rec.has(breaker.Closed, breaker.CauseProbesSucceeded)
	}) {
		t.Fatalf("no open and close within 15s; transitions: %+v", rec.all())
	}
	tot := b.Snapshot().Totals
	if tot.RejectedOpen == 0 {
		t.Errorf("no call rejected while open: %+v", tot)
	}
	// The cache from the healthy phase answers for payments.
	if tot.FallbackSuccesses == 0 {
		t.Errorf("no fallback counted: %+v", tot)
	}
	if s := inst.Stats(); s.Requests == 0 || s.Degraded == 0 {
		t.Errorf("stats %+v, want requests and degraded calls", s)
	}
}

func TestFleetBusinessErrorsTripNothing(t *testing.T) {
	f := startFleet(t, FleetConfig{
		CollectorURL: nowhere,
		Script:       Script{Phases: []Phase{{Name: "business errors", Duration: time.Minute, Fault: Fault{BusinessRate: 1}}}},
		Dependencies: []DependencySpec{{Name: "inventory"}},
		Services:     []ServiceSpec{{Name: "catalog", Instances: 2, Dependencies: []string{"inventory"}}},
		Rate:         100,
		Breaker:      testBreakerConfig(),
	})
	var rec recorder
	for _, inst := range f.Instances() {
		defer rec.watch(inst.Breakers()[0])()
	}
	for _, inst := range f.Instances() {
		eventually.True(t, inst.ID+": 50 successful calls", func() bool { return inst.Breakers()[0].Snapshot().Totals.Successes >= 50 })
		tot := inst.Breakers()[0].Snapshot().Totals
		if tot.Failures != 0 || tot.FallbackSuccesses+tot.FallbackFailures != 0 {
			t.Errorf("%s: business errors counted as failures: %+v", inst.ID, tot)
		}
	}
	if ts := rec.all(); len(ts) != 0 {
		t.Fatalf("business errors tripped breakers: %+v", ts)
	}
}

func TestFallbackWithoutCacheOrDefaultFails(t *testing.T) {
	inst := &Instance{cache: map[string]cached{}}
	now := clocktest.Epoch()
	tests := []struct {
		name    string
		dep     string
		cacheAt time.Time // zero = nothing cached
		wantErr bool
	}{
		{"payments without cache", "payments", time.Time{}, true},
		{"payments with a fresh cache", "payments", now.Add(-time.Second), false},
		{"pricing with a stale cache", "pricing", now.Add(-time.Minute), true},
		{"inventory has a safe default", "inventory", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delete(inst.cache, tt.dep)
			if !tt.cacheAt.IsZero() {
				inst.cache[tt.dep] = cached{at: tt.cacheAt}
			}
			err := inst.fallback(tt.dep, now)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errNoFallback)) {
				t.Fatalf("fallback(%s) = %v, want error %v", tt.dep, err, tt.wantErr)
			}
		})
	}
}

func TestStartFleetRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  FleetConfig
		want string
	}{
		{"no collector URL", FleetConfig{}, "CollectorURL"},
		{"bad rate", FleetConfig{CollectorURL: nowhere, Rate: -1}, "Rate"},
		{"unknown dependency", FleetConfig{CollectorURL: nowhere, Dependencies: []DependencySpec{{Name: "a"}},
			Services: []ServiceSpec{{Name: "s", Instances: 1, Dependencies: []string{"b"}}}}, `unknown dependency "b"`},
		{"bad script", FleetConfig{CollectorURL: nowhere, Script: Script{Phases: []Phase{{Name: "x"}}}}, "Duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := StartFleet(tt.cfg)
			if err == nil {
				f.Close(context.Background())
				t.Fatal("StartFleet succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("StartFleet: %v, want it to name %q", err, tt.want)
			}
		})
	}
}

func TestDefaultFleetShape(t *testing.T) {
	deps := map[string]bool{}
	for _, d := range DefaultDependencies() {
		deps[d.Name] = true
	}
	n := 0
	for _, s := range DefaultServices() {
		n += s.Instances
		for _, d := range s.Dependencies {
			if !deps[d] {
				t.Errorf("service %s calls %s, which is not a default dependency", s.Name, d)
			}
		}
	}
	if n != 7 {
		t.Errorf("%d instances, want 7 (checkout x3, search x2, catalog x2)", n)
	}
}

// TestNoSlowCallsTripsOnTheScriptsFailureRateHoweverSlowTheCalls: a
// dependency whose answers take longer than the breakers' slow-call
// duration (as on a busy machine, where a fast answer is read late)
// while its failures climb: with NoSlowCalls (the demo's inventory) its
// breaker trips on the failure rate, once the script's error rate has
// climbed near the threshold; without, the slow calls trip it at once.
func TestNoSlowCallsTripsOnTheScriptsFailureRateHoweverSlowTheCalls(t *testing.T) {
	t.Parallel()
	script := Script{Phases: []Phase{
		{Name: "failures climbing", Duration: 4 * time.Second,
			Fault:  Fault{Latency: 300 * time.Millisecond, ErrorStatus: 500},
			RampTo: &Fault{Latency: 300 * time.Millisecond, ErrorRate: 0.8, ErrorStatus: 500}},
		{Name: "failing", Duration: time.Minute, Fault: Fault{Latency: 300 * time.Millisecond, ErrorRate: 0.8, ErrorStatus: 500}},
	}}
	bc := testBreakerConfig()
	bc.SlowCallDuration, bc.SlowCallRateThreshold, bc.OpenDuration = 250*time.Millisecond, 50, time.Minute
	for _, noSlow := range []bool{true, false} {
		start := time.Now() // real time: the script runs on it
		f := startFleet(t, FleetConfig{
			CollectorURL: nowhere, Script: script,
			Dependencies: []DependencySpec{{Name: "inventory", NoSlowCalls: noSlow}},
			Services:     []ServiceSpec{{Name: "catalog", Instances: 1, Dependencies: []string{"inventory"}}},
			Rate:         50, Breaker: bc,
		})
		b := f.Instances()[0].Breakers()[0]
		var rec recorder
		stop := rec.watch(b)
		if !eventually.Wait(30*time.Second, func() bool { return len(rec.all()) > 0 }) {
			t.Fatalf("NoSlowCalls %v: inventory never tripped", noSlow)
		}
		stop()
		first := rec.all()[0]
		after := time.Since(start)
		switch {
		case noSlow && first.Cause.Kind != breaker.CauseFailureRate:
			t.Errorf("with NoSlowCalls the first transition is %+v, want a failure-rate trip", first)
		case noSlow && after < 1500*time.Millisecond:
			// The error rate reaches 50% 2.5 s in; a 10-call window
			// can run a little ahead of it, not a second and more.
			t.Errorf("with NoSlowCalls inventory tripped %v in, before its failures climbed", after)
		case !noSlow && first.Cause.Kind != breaker.CauseSlowCallRate:
			t.Errorf("without NoSlowCalls the first transition is %+v, want a slow-call trip (the test's premise)", first)
		}
		t.Logf("NoSlowCalls %v: %s trip %v in", noSlow, first.Cause.Kind, after.Round(10*time.Millisecond))
	}
	for _, d := range DefaultDependencies() {
		if d.Name == "inventory" && !d.NoSlowCalls {
			t.Error("the demo's inventory can trip on slow calls: its story would depend on the machine's load")
		}
	}
}
