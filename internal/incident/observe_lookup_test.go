package incident

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestObserveDependencyMatchesALookupOfEveryLine holds the detector's
// positional shortcut (depState.prev: a line at the same place of the
// same instance, as stale and as tripped as at the last event, is passed
// over) to the plain rule, every live line looked up, over random
// sequences of dependency events, transitions, resyncs and ticks:
// instances join, leave and swap places, go stale and live again, their
// LastTrip appears, changes to another trip and disappears, their state
// changes without a transition, the dependency's member count changes, a
// leaving instance's place is taken by another. The reference is a second
// detector whose prev is forgotten before every step; both must decide
// the same changes and hold the same states, trips and last trips.
func TestObserveDependencyMatchesALookupOfEveryLine(t *testing.T) {
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	states := []string{protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateClosed}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{Share: []float64{0, 50}[rng.IntN(2)], Quiet: time.Duration(1+rng.IntN(5)) * time.Second, IncludeForced: rng.IntN(2) == 0}
		d, err := NewDetector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := NewDetector(cfg)
		at := clocktest.Epoch()
		var prev []*cbdash.InstanceBreaker
		trip := func() *protocol.Transition {
			return &protocol.Transition{Breaker: k.Breaker, From: protocol.StateClosed, To: protocol.StateOpen, At: at.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond).UnixMilli()}
		}
		var log []string
		for step := range 80 {
			at = at.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			var name string
			var got, want []Change
			apply := func(f func(d *Detector) []Change) {
				for _, s := range ref.deps {
					s.prev = nil // the plain rule: nothing learned is passed over
				}
				want = f(ref)
				got = f(d)
			}
			switch op := rng.IntN(10); {
			case op < 6: // a dependency event, from the last one's members, disturbed
				lines := make([]*cbdash.InstanceBreaker, 0, len(prev)+1)
				for _, ib := range prev {
					c := *ib // a new line, as live state makes
					lines = append(lines, &c)
				}
				name = "dependency"
				switch rng.IntN(9) {
				case 0:
					inst := fmt.Sprintf("i%d", rng.IntN(6))
					dup := false
					for _, ib := range lines {
						dup = dup || ib.Instance == inst
					}
					if !dup {
						i := rng.IntN(len(lines) + 1)
						ib := &cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: inst, State: states[rng.IntN(len(states))]}
						lines = append(lines[:i], append([]*cbdash.InstanceBreaker{ib}, lines[i:]...)...)
						name += " join " + inst
					}
				case 1:
					if len(lines) > 0 {
						i := rng.IntN(len(lines))
						name += " leave " + lines[i].Instance
						lines = append(lines[:i], lines[i+1:]...)
					}
				case 2:
					if len(lines) > 1 {
						a, b := rng.IntN(len(lines)), rng.IntN(len(lines))
						lines[a], lines[b] = lines[b], lines[a]
						name += " swap"
					}
				case 3:
					if len(lines) > 0 {
						ib := lines[rng.IntN(len(lines))]
						ib.Stale = !ib.Stale
						name += fmt.Sprintf(" %s stale=%v", ib.Instance, ib.Stale)
					}
				case 4:
					if len(lines) > 0 {
						ib := lines[rng.IntN(len(lines))]
						switch {
						case ib.LastTrip == nil:
							ib.LastTrip = trip()
						case rng.IntN(2) == 0:
							ib.LastTrip = trip() // another trip
						default:
							ib.LastTrip = nil
						}
						name += " " + ib.Instance + " trip"
					}
				case 5:
					if len(lines) > 0 {
						ib := lines[rng.IntN(len(lines))]
						ib.State = states[rng.IntN(len(states))]
						name += " " + ib.Instance + " state " + ib.State
					}
				case 6: // one leaves and another takes its place
					if len(lines) > 0 {
						i := rng.IntN(len(lines))
						lines[i].Instance = fmt.Sprintf("i%d", rng.IntN(6))
						for j, ib := range lines {
							if j != i && ib.Instance == lines[i].Instance {
								lines = append(lines[:j], lines[j+1:]...)
								break
							}
						}
						name += " replace"
					}
				}
				live := 0
				for _, ib := range lines {
					if !ib.Stale {
						live++
					}
				}
				dep := cbdash.Dependency{DependencyKey: k, Instances: live + rng.IntN(2)} // members the view may not list
				dep.PerInstance = lines
				prev = lines
				ev := cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &dep}
				apply(func(d *Detector) []Change { return d.Observe(ev) })
			case op < 8: // a transition of a listed (or unlisted) instance
				inst := fmt.Sprintf("i%d", rng.IntN(7))
				to := states[rng.IntN(len(states))]
				tr := cbdash.TransitionRecord{Service: k.Service, Instance: inst, Transition: protocol.Transition{
					Breaker: k.Breaker, From: protocol.StateClosed, To: to, At: at.UnixMilli()}}
				name = "transition " + inst + " " + to
				apply(func(d *Detector) []Change {
					return d.Observe(cbdash.Event{Kind: cbdash.EventTransition, At: at, Transition: &tr})
				})
			case op < 9: // a resync with the last event's lines
				dep := cbdash.Dependency{DependencyKey: k, Instances: len(prev), PerInstance: prev}
				name = "resync"
				apply(func(d *Detector) []Change { return d.Resync([]cbdash.Dependency{dep}, at) })
			default:
				at = at.Add(time.Duration(rng.IntN(6)) * time.Second)
				name = "tick"
				apply(func(d *Detector) []Change { return d.Tick(at) })
			}
			log = append(log, name)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d (%v): changes\n got %+v\nwant %+v", seed, step, log, got, want)
			}
			gs, ws := d.deps[k], ref.deps[k]
			if (gs == nil) != (ws == nil) {
				t.Fatalf("seed %d step %d (%v): dependency state kept %v, reference %v", seed, step, log, gs != nil, ws != nil)
			}
			if gs == nil {
				continue
			}
			for _, c := range []struct {
				what      string
				got, want any
			}{{"states", gs.states, ws.states}, {"trips", gs.trips, ws.trips}, {"tripped", gs.tripped, ws.tripped},
				{"live", gs.live, ws.live}, {"incident", gs.inc, ws.inc}, {"closedSince", gs.closedSince, ws.closedSince}} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Fatalf("seed %d step %d (%v): %s\n got %+v\nwant %+v", seed, step, log, c.what, c.got, c.want)
				}
			}
		}
	}
}
