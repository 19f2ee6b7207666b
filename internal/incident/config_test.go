package incident

import (
	"fmt"
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
	// a comes back at its place with a new configuration, b moves back:
	// a was forgotten when it left (gone), so it is new, not changed.
	if got := observe(line("a", cfg(30)), line("b", b2)); len(got) != 0 {
		t.Fatalf("a, back after it was gone: %v", got)
	}
	got = observe(line("a", cfg(35)), line("b", b2))
	if len(got) != 1 || got[0].Instance != "a" || got[0].Previous.FailureRateThreshold != 30 || got[0].Config.FailureRateThreshold != 35 {
		t.Fatalf("a's change after it came back: %v", got)
	}
	// b changes at a place where the last event had the same pointer for another instance.
	shared := cfg(20)
	observe(line("a", shared), line("b", b2))
	got = observe(line("b", shared))
	if len(got) != 1 || got[0].Instance != "b" || got[0].Config.FailureRateThreshold != 20 {
		t.Fatalf("b took the pointer a had at its place: %v", got)
	}
}

// TestConfigWatchForgetsInstancesThatLeave: the configurations of
// instances that have left a dependency (gone), and of a dependency
// forgotten, are not kept: a fleet whose instances get new names on
// every deployment does not grow the watch without end.
func TestConfigWatchForgetsInstancesThatLeave(t *testing.T) {
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	w := newConfigWatch()
	at := clocktest.Epoch()
	observe := func(insts ...string) {
		lines := make([]*cbdash.InstanceBreaker, len(insts))
		for i, inst := range insts {
			lines[i] = &cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: inst,
				Config: &protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100}}
		}
		if got := w.observe(cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &cbdash.Dependency{DependencyKey: k, PerInstance: lines}}); len(got) != 0 {
			t.Fatalf("no configuration changed, got %v", got)
		}
	}
	// Ten deployments of three pods, each pod with a new name; an
	// undeclared line (no hello yet) among them.
	for d := range 10 {
		pods := []string{fmt.Sprintf("pod-%d-a", d), fmt.Sprintf("pod-%d-b", d), fmt.Sprintf("pod-%d-c", d)}
		observe(append(pods, "pod-old")...) // the old pod still there while the new ones start
		observe(pods...)
	}
	if n := len(w.last[k]); n != 3 {
		t.Fatalf("the watch keeps %d instances' configurations, want the 3 present", n)
	}
	for _, inst := range []string{"pod-9-a", "pod-9-b", "pod-9-c"} {
		if w.last[k][inst] == nil {
			t.Fatalf("%s, present, was forgotten", inst)
		}
	}
	observe() // the dependency is forgotten
	if _, ok := w.last[k]; ok || len(w.places) != 0 {
		t.Fatalf("a forgotten dependency is still kept: %v %v", w.last, w.places)
	}
}
