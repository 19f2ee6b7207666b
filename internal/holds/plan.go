package holds

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cbdash/cbdash"
)

// Plan returns the blast radius of req without acting: the services and
// live (non-stale) instances ("service/instance") it would cover now,
// their calls per second, the breakers it cannot hold with why, the
// live holds it would supersede, each sorted, the stop conditions it would
// have, and why pre-flight would refuse it as a drill (Refused; none: it
// would start). Errors: cbdash.ErrInvalid as Create, or the store's.
func (m *Manager) Plan(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldPlan, error) {
	if err := req.Validate(m.cfg.MaxHold); err != nil {
		return cbdash.HoldPlan{}, err
	}
	refused, err := m.Preflight(ctx, req)
	if err != nil {
		return cbdash.HoldPlan{}, err
	}
	now := m.now()
	p := cbdash.HoldPlan{Selector: cbdash.HoldRecord{HoldRequest: req}.Covering(), Action: req.Action, Services: []string{}, Instances: []string{}, Refused: refused}
	p.Stops, _ = cbdash.EffectiveStops(m.cfg.DefaultStops, req.DropStops, req.StopIf) // Preflight read them
	services := map[string]bool{}
	superseded := map[string]bool{}
	insts, err := m.fleetInstances(ctx)
	if err != nil {
		return cbdash.HoldPlan{}, fmt.Errorf("instances served by other collectors: %w", err)
	}
	m.mu.Lock()
	others := m.listLocked()
	m.mu.Unlock()
	for _, inst := range insts {
		if inst.Stale { // connected, on HTTP ingest, or away for less than the stale timeout
			continue
		}
		eligible, matched := planInstance(&p, p.Selector, inst, others, superseded, now) // a stepped hold's first step
		if eligible {
			p.Eligible++
		}
		if matched {
			services[inst.Ref.Service] = true
			p.Instances = append(p.Instances, inst.Ref.Service+"/"+inst.Ref.Instance)
		}
	}
	rate, counted := m.rateElsewhere(p.Selector, insts)
	p.CallsPerSecond += rate
	p.CallsUnknown = callsUnknown(p.Selector, insts, counted)
	for s := range services {
		p.Services = append(p.Services, s)
	}
	sort.Strings(p.Services)
	for id := range superseded {
		p.Superseded = append(p.Superseded, id)
	}
	sort.Strings(p.Superseded)
	sort.Strings(p.Unsupported)
	return p, nil
}

// rateElsewhere is the calls per second of the breakers sel covers on
// instances served elsewhere (Elsewhere's parts sel covers whole, less
// those of a dependency with a member there that cannot be held), and
// the dependencies it counted.
func (m *Manager) rateElsewhere(sel cbdash.Selector, insts []Instance) (float64, map[cbdash.DependencyKey]bool) {
	parts := m.partsCovered(sel)
	if len(parts) == 0 {
		return 0, nil
	}
	blocked := map[cbdash.DependencyKey]bool{}
	for _, inst := range insts {
		for b := range inst.Unsupported {
			if inst.Elsewhere {
				blocked[cbdash.DependencyKey{Service: inst.Ref.Service, Breaker: b}] = true
			}
		}
	}
	rate := 0.0
	counted := map[cbdash.DependencyKey]bool{}
	for _, pt := range parts {
		if !blocked[pt.DependencyKey] {
			rate += pt.Rate
			counted[pt.DependencyKey] = true
		}
	}
	return rate, counted
}

// callsUnknown counts the live instances served elsewhere with a breaker
// sel matches and can hold whose dependency's calls rateElsewhere did not
// count (HoldPlan.CallsUnknown).
func callsUnknown(sel cbdash.Selector, insts []Instance, counted map[cbdash.DependencyKey]bool) int {
	n := 0
	for _, inst := range insts {
		if !inst.Elsewhere || inst.Stale {
			continue
		}
		for _, b := range inst.Breakers {
			if _, no := inst.Unsupported[b]; no || !sel.Matches(inst.Ref, b) {
				continue
			}
			if !counted[cbdash.DependencyKey{Service: inst.Ref.Service, Breaker: b}] {
				n++
				break
			}
		}
	}
	return n
}

// planInstance adds what sel covers of inst to p: its unsupported
// breakers, its calls per second, and (in superseded) the holds governing
// its matched breakers now. eligible says sel's dependency has breakers on
// inst and inst has sel's labels; matched that sel covers one it can hold.
func planInstance(p *cbdash.HoldPlan, sel cbdash.Selector, inst Instance, others []cbdash.HoldRecord,
	superseded map[string]bool, now time.Time) (eligible, matched bool) {
	// The population a share is of: the dependency's instances with the
	// selector's labels (a label chooses instances; the share and the
	// instance list narrow them).
	population := cbdash.Selector{Service: sel.Service, Breaker: sel.Breaker, Labels: sel.Labels}
	for _, b := range inst.Breakers {
		if !population.Matches(inst.Ref, b) {
			continue
		}
		eligible = true
		if !sel.Matches(inst.Ref, b) {
			continue
		}
		if why, no := inst.Unsupported[b]; no {
			p.Unsupported = append(p.Unsupported, inst.Ref.Service+"/"+inst.Ref.Instance+": "+why)
			continue
		}
		matched = true
		p.CallsPerSecond += inst.Rates[b]
		if g, ok := cbdash.Governing(others, inst.Ref, b, now); ok {
			superseded[g.ID] = true
		}
	}
	return eligible, matched
}

// sortNewestFirst sorts hs the governing first: a hold before those it
// supersedes (cbdash.HoldRecord.Superseded).
func sortNewestFirst(hs []cbdash.HoldRecord) {
	sort.Slice(hs, func(i, j int) bool { return hs[j].Superseded(hs[i]) })
}
