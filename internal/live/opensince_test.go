package live

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestOpenSinceIsTheEpisodeNotTheLastProbe flaps a breaker through
// failed probes: OpenSince stays at the trip, per instance and for the
// dependency, and is cleared once every instance is closed again.
func TestOpenSinceIsTheEpisodeNotTheLastProbe(t *testing.T) {
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db"}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "b", cfg, nil), 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	seq := map[string]uint64{}
	move := func(inst, from, to string) {
		t.Helper()
		seq[inst]++
		now := clk.Now()
		l.Apply(Key{"api", inst}, &protocol.Batch{Seq: seq[inst],
			Transitions: []protocol.Transition{{Breaker: "db", From: from, To: to, At: now.UnixMilli()}},
			Windows:     []protocol.Window{window("db", to, now, protocol.Counts{}, protocol.Headroom{}, nil)},
		}, now)
	}
	openSince := func() (dep time.Time, per map[string]time.Time) {
		d, _ := l.Dependency(k)
		per = map[string]time.Time{}
		for _, ib := range d.PerInstance {
			per[ib.Instance] = ib.OpenSince
		}
		return d.OpenSince, per
	}

	tripA := clk.Now()
	move("a", protocol.StateClosed, protocol.StateOpen)
	for range 3 { // failed probes
		clk.Advance(5 * time.Second)
		move("a", protocol.StateOpen, protocol.StateHalfOpen)
		clk.Advance(time.Second)
		move("a", protocol.StateHalfOpen, protocol.StateOpen)
	}
	tripB := clk.Now()
	move("b", protocol.StateClosed, protocol.StateOpen)
	dep, per := openSince()
	if !dep.Equal(tripA) || !per["a"].Equal(tripA) || !per["b"].Equal(tripB) {
		t.Fatalf("open since: dependency %v, per instance %v; want %v (a's trip) and b at %v", dep, per, tripA, tripB)
	}

	clk.Advance(time.Second)
	move("a", protocol.StateOpen, protocol.StateHalfOpen)
	move("a", protocol.StateHalfOpen, protocol.StateClosed)
	dep, per = openSince()
	if !dep.Equal(tripB) || !per["a"].IsZero() {
		t.Fatalf("after a closed: dependency %v (want b's trip %v), a %v (want zero)", dep, tripB, per["a"])
	}
	move("b", protocol.StateOpen, protocol.StateClosed)
	if dep, _ = openSince(); !dep.IsZero() {
		t.Fatalf("all closed: open since %v, want zero", dep)
	}
}
