package holds

import (
	"context"
	"slices"
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Several collectors, one fleet (issue 36). Instances lists only the
// instances served here (connected here, or on HTTP ingest here): what a
// hold is applied to by this collector. What a hold would cover, shown
// before it is created (Plan), pre-flight's stop condition breached now
// and the refusal of breakers that cannot be held count the whole fleet:
// the instances served here and those other collectors serve
// (Config.Elsewhere).

// Elsewhere is what a collector of a cluster knows of the instances the
// other collectors serve. Its methods may do I/O: the Manager never
// calls them with its lock held.
type Elsewhere interface {
	// InstancesElsewhere lists the instances served by other collectors
	// (none of Instances'), as the store keeps them: Ref (labels
	// included), Breakers, Unsupported (from their hellos'
	// configurations) and Stale; Rates, Last and Conn are empty (the
	// store keeps no window of an instance). Errors: the store's.
	InstancesElsewhere(ctx context.Context) ([]Instance, error)
	// PartsElsewhere returns, of each dependency and other collector,
	// the sum of its live members' last window reports: a selector that
	// covers every member of a part counts it (pre-flight, Plan's calls
	// per second).
	PartsElsewhere() []Part
}

// Part is one other collector's live members of one dependency, summed.
type Part struct {
	cbdash.DependencyKey
	Instances int               // live members
	Labels    map[string]string // shared by every member
	// Last is the sum of the members' last window reports, Rate the sum
	// of their calls per second (admitted and rejected calls over each
	// report's period).
	Last protocol.Counts
	Rate float64
}

// fleetInstances is Instances' instances and, in a cluster, those the
// other collectors serve (Elsewhere), sorted by service then instance.
// Errors: Elsewhere's.
func (m *Manager) fleetInstances(ctx context.Context) ([]Instance, error) {
	here := m.cfg.Instances.HoldInstances()
	if m.cfg.Elsewhere == nil {
		return here, nil
	}
	there, err := m.cfg.Elsewhere.InstancesElsewhere(ctx)
	if err != nil {
		return nil, err
	}
	if len(there) == 0 {
		return here, nil
	}
	all := append(slices.Clip(here), there...)
	slices.SortFunc(all, func(a, b Instance) int {
		if c := strings.Compare(a.Ref.Service, b.Ref.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Ref.Instance, b.Ref.Instance)
	})
	return all, nil
}

// partsCovered returns the parts elsewhere of which sel covers every
// member: sel covers the dependency, chooses instances by labels every
// member has (or none), and names no instance and no share below 100 %.
// A selector that narrows a part otherwise cannot count it (no window of
// a single member served elsewhere is known here).
func (m *Manager) partsCovered(sel cbdash.Selector) []Part {
	if m.cfg.Elsewhere == nil || len(sel.Instances) > 0 || (sel.Share > 0 && sel.Share < 100) {
		return nil
	}
	var out []Part
	for _, p := range m.cfg.Elsewhere.PartsElsewhere() {
		if !sel.CoversDependency(p.DependencyKey) || !labelsWithin(sel.Labels, p.Labels) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// labelsWithin reports whether every label of want is in have.
func labelsWithin(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
