package incident

import (
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestConfigWatchSeesChangesWhateverTheOrder: a configuration change is
// reported once, whether the line sits at the place it had in the last
// event (passed over by pointer) or has moved (members came or went),
// and an equal configuration from a new hello is no change.
func TestConfigWatchSeesChangesWhateverTheOrder(t *testing.T) {
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	cfg := func(threshold float64) *protocol.BreakerConfig {
		return &protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: threshold}
	}
	line := func(inst string, c *protocol.BreakerConfig) *cbdash.InstanceBreaker {
		return &cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: inst, Config: c}
	}
	w := newConfigWatch()
	at := clocktest.Epoch()
	observe := func(lines ...*cbdash.InstanceBreaker) []cbdash.ConfigChange {
		return w.observe(cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &cbdash.Dependency{DependencyKey: k, PerInstance: lines}})
	}
	a1, b1 := cfg(50), cfg(50)
	if got := observe(line("a", a1), line("b", b1)); len(got) != 0 {
		t.Fatalf("first event: %v", got)
	}
	if got := observe(line("a", a1), line("b", b1)); len(got) != 0 {
		t.Fatalf("same configurations: %v", got)
	}
	if got := observe(line("a", a1), line("b", cfg(50))); len(got) != 0 {
		t.Fatalf("an equal configuration from a new hello: %v", got)
	}
	b2 := cfg(40)
	got := observe(line("a", a1), line("b", b2))
	if len(got) != 1 || got[0].Instance != "b" || got[0].Previous.FailureRateThreshold != 50 || got[0].Config.FailureRateThreshold != 40 {
		t.Fatalf("b's change: %v", got)
	}
	if got := observe(line("a", a1), line("b", b2)); len(got) != 0 {
		t.Fatalf("reported twice: %v", got)
	}
	// a leaves: b moves to a's place with its configuration unchanged.
	if got := observe(line("b", b2)); len(got) != 0 {
		t.Fatalf("b moved: %v", got)
	}
	// a comes back at its place with a new configuration, b moves back.
	got = observe(line("a", cfg(30)), line("b", b2))
	if len(got) != 1 || got[0].Instance != "a" || got[0].Previous.FailureRateThreshold != 50 || got[0].Config.FailureRateThreshold != 30 {
		t.Fatalf("a's change while away: %v", got)
	}
	// b changes at a place where the last event had the same pointer for another instance.
	shared := cfg(20)
	observe(line("a", shared), line("b", b2))
	got = observe(line("b", shared))
	if len(got) != 1 || got[0].Instance != "b" || got[0].Config.FailureRateThreshold != 20 {
		t.Fatalf("b took the pointer a had at its place: %v", got)
	}
}
