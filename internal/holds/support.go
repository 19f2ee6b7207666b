package holds

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cbdash/cbdash"
)

// Breakers whose hello says holds_unsupported (a sony/gobreaker v2
// breaker fed by its adapter, say) cannot apply operator commands: the
// agent would refuse each one. The collector refuses such commands up
// front, with the same reason, instead of recording commands that can
// only fail; a fleet-wide hold that also matches breakers that can be
// held is accepted and simply not sent to the others (its blast radius
// lists them, see Plan).

// refuseUnsupported refuses a hold whose selector matches breakers on
// live instances of which none can be held, over the fleet (served here
// or elsewhere). Errors: cbdash.ErrInvalid, or Elsewhere's. A selector that matches no
// live breaker at all is accepted: it is desired state, for the instances
// that say hello later.
func (m *Manager) refuseUnsupported(ctx context.Context, sel cbdash.Selector) error {
	insts, err := m.fleetInstances(ctx)
	if err != nil {
		return fmt.Errorf("instances served by other collectors: %w", err)
	}
	matched := 0
	reasons := map[string][]string{} // reason -> "service/instance"
	for _, inst := range insts {
		for _, b := range inst.Breakers {
			if !sel.Matches(inst.Ref, b) {
				continue
			}
			why, no := inst.Unsupported[b]
			if !no {
				return nil
			}
			matched++
			reasons[why] = append(reasons[why], inst.Ref.Service+"/"+inst.Ref.Instance)
		}
	}
	if matched == 0 {
		return nil
	}
	return fmt.Errorf("%w: holds are not available for %s on %s", cbdash.ErrInvalid, sel.String(), reasonList(reasons))
}

// RefuseUnsupportedTargets refuses a command (release, reset) for breaker
// k of the named instances when none of them can apply it (each is known,
// here or served by another collector, and its hello said
// holds_unsupported for k's breaker). Errors: cbdash.ErrInvalid with the
// reasons, one group per reason; Elsewhere's.
func (m *Manager) RefuseUnsupportedTargets(ctx context.Context, k cbdash.DependencyKey, instances []string) error {
	if len(instances) == 0 {
		return nil
	}
	var there map[Key]Instance // the instances served elsewhere, read at the first target not served here
	reasons := map[string][]string{}
	for _, inst := range instances {
		in, ok := m.cfg.Instances.HoldInstance(Key{k.Service, inst})
		if !ok && m.cfg.Elsewhere != nil {
			if there == nil {
				all, err := m.cfg.Elsewhere.InstancesElsewhere(ctx)
				if err != nil {
					return fmt.Errorf("instances served by other collectors: %w", err)
				}
				there = make(map[Key]Instance, len(all))
				for _, e := range all {
					there[e.key()] = e
				}
			}
			in, ok = there[Key{k.Service, inst}]
		}
		if !ok {
			return nil
		}
		why, no := in.Unsupported[k.Breaker]
		if !no {
			return nil
		}
		reasons[why] = append(reasons[why], k.Service+"/"+inst)
	}
	return fmt.Errorf("%w: commands are not available for %s on %s", cbdash.ErrInvalid, k, reasonList(reasons))
}

// reasonList writes "checkout/i1, checkout/i2: a sony/gobreaker v2 breaker
// cannot be held open or closed", one group per reason.
func reasonList(reasons map[string][]string) string {
	keys := make([]string, 0, len(reasons))
	for why := range reasons {
		keys = append(keys, why)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, why := range keys {
		insts := reasons[why]
		sort.Strings(insts)
		if len(insts) > 5 {
			insts = append(insts[:5:5], fmt.Sprintf("%d more", len(reasons[why])-5))
		}
		parts = append(parts, strings.Join(insts, ", ")+": "+why)
	}
	return strings.Join(parts, "; ")
}
