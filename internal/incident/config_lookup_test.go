package incident

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestConfigWatchMatchesALookupOfEveryLine holds the watch's positional
// shortcut to the plain rule (every declared line looked up by instance,
// compared by value) over random event sequences: instances join, leave
// and swap places, a leaving instance's place is taken by another with the
// same configuration pointer, pointers are shared between instances,
// equal values come in new pointers, and lines are not declared yet;
// an instance that leaves is forgotten.
func TestConfigWatchMatchesALookupOfEveryLine(t *testing.T) {
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	at := clocktest.Epoch()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		pool := []*protocol.BreakerConfig{nil, {}} // not declared yet
		for i := range 6 {
			// Two pointers per value: equal configurations from different hellos.
			for range 2 {
				pool = append(pool, &protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: float64(10 * (i%3 + 1))})
			}
		}
		w := newConfigWatch()
		ref := map[string]protocol.BreakerConfig{}
		var prev []*cbdash.InstanceBreaker
		for step := range 60 {
			// Start from the last event's members, then disturb them.
			var lines []*cbdash.InstanceBreaker
			for _, ib := range prev {
				lines = append(lines, &cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: ib.Instance, Config: ib.Config})
			}
			switch rng.IntN(6) {
			case 0: // one joins somewhere
				inst := fmt.Sprintf("i%d", rng.IntN(8))
				dup := false
				for _, ib := range lines {
					dup = dup || ib.Instance == inst
				}
				if !dup {
					at := rng.IntN(len(lines) + 1)
					lines = append(lines[:at], append([]*cbdash.InstanceBreaker{{Service: k.Service, Breaker: k.Breaker, Instance: inst, Config: pool[rng.IntN(len(pool))]}}, lines[at:]...)...)
				}
			case 1: // one leaves
				if len(lines) > 0 {
					at := rng.IntN(len(lines))
					lines = append(lines[:at], lines[at+1:]...)
				}
			case 2: // two swap places
				if len(lines) > 1 {
					a, b := rng.IntN(len(lines)), rng.IntN(len(lines))
					lines[a], lines[b] = lines[b], lines[a]
				}
			case 3: // one re-hellos
				if len(lines) > 0 {
					lines[rng.IntN(len(lines))].Config = pool[rng.IntN(len(pool))]
				}
			case 4: // one leaves and another takes its place with its configuration
				if len(lines) > 0 {
					at := rng.IntN(len(lines))
					lines[at].Instance = fmt.Sprintf("i%d", rng.IntN(8))
					for j, ib := range lines {
						if j != at && ib.Instance == lines[at].Instance {
							lines = append(lines[:j], lines[j+1:]...)
							break
						}
					}
				}
			}
			var want []string
			for _, ib := range lines {
				if ib.Config == nil || ib.Config.Name == "" {
					continue
				}
				if old, seen := ref[ib.Instance]; seen && old != *ib.Config {
					want = append(want, fmt.Sprintf("%s %v>%v", ib.Instance, old.FailureRateThreshold, ib.Config.FailureRateThreshold))
				}
				ref[ib.Instance] = *ib.Config
			}
			// An instance that has left the lines (gone) is forgotten: if
			// it comes back, its configuration is new, not a change.
			for inst := range ref {
				present := false
				for _, ib := range lines {
					present = present || ib.Instance == inst
				}
				if !present {
					delete(ref, inst)
				}
			}
			var got []string
			for _, c := range w.observe(cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &cbdash.Dependency{DependencyKey: k, PerInstance: lines}}) {
				got = append(got, fmt.Sprintf("%s %v>%v", c.Instance, c.Previous.FailureRateThreshold, c.Config.FailureRateThreshold))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d step %d: changes %v, want %v", seed, step, got, want)
			}
			prev = lines
		}
	}
}
