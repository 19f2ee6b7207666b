package incident

import (
	"fmt"
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// configWatch notices breaker configurations that change between two
// dependency events (a hello with a new configuration). It does no I/O and
// is not safe for concurrent use.
type configWatch struct {
	// last is the configuration of each instance's line in the last
	// event, by dependency, then instance: a line's Config points at an
	// immutable value (cbdash.InstanceBreaker.Config), so an unchanged
	// one is recognised by its pointer alone; a different pointer may
	// still hold an equal value (a new hello), so values are compared.
	last map[cbdash.DependencyKey]map[string]*protocol.BreakerConfig
	// places are the instance and configuration pointer of each line of
	// the last event, by dependency and in its order: a line whose
	// instance and configuration pointer are those at its place in the
	// last event is passed over without looking its instance up. Not the
	// lines themselves: they would keep the last event's lines, and the
	// batches of windows their Last points into, alive.
	places map[cbdash.DependencyKey][]configPlace
}

func newConfigWatch() *configWatch {
	return &configWatch{last: make(map[cbdash.DependencyKey]map[string]*protocol.BreakerConfig),
		places: make(map[cbdash.DependencyKey][]configPlace)}
}

// configPlace is a line's instance and configuration (see configWatch.places).
type configPlace struct {
	instance string
	config   *protocol.BreakerConfig
}

// observe returns the changes a dependency event shows; the first
// configuration seen of an instance is not a change, nor is that of an
// instance back after it had left the dependency's lines (gone).
func (w *configWatch) observe(ev cbdash.Event) []cbdash.ConfigChange {
	if ev.Kind != cbdash.EventDependency || ev.Dependency == nil {
		return nil
	}
	k := ev.Dependency.DependencyKey
	if len(ev.Dependency.PerInstance) == 0 {
		// The dependency is forgotten (its last instance is gone): so is
		// what was learned of it.
		delete(w.last, k)
		delete(w.places, k)
		return nil
	}
	last := w.last[k]
	if last == nil {
		last = make(map[string]*protocol.BreakerConfig, len(ev.Dependency.PerInstance))
		w.last[k] = last
	}
	var out []cbdash.ConfigChange
	declared := 0 // lines with a configuration
	before := w.places[k]
	places := before
	if len(places) != len(ev.Dependency.PerInstance) {
		places = make([]configPlace, len(ev.Dependency.PerInstance))
		w.places[k] = places
	}
	for i, ib := range ev.Dependency.PerInstance {
		if ib.Config != nil && ib.Config.Name != "" {
			declared++
		}
		here := configPlace{ib.Instance, ib.Config}
		same := i < len(before) && before[i] == here
		places[i] = here // places may be before itself: read first
		if same {
			continue // as at its place in the last event, so in last too
		}
		if ib.Config == nil || ib.Config.Name == "" {
			continue // not declared yet
		}
		prev, seen := last[ib.Instance]
		if prev == ib.Config {
			continue // the same configuration
		}
		last[ib.Instance] = ib.Config // the newest only is kept
		if seen && *prev != *ib.Config {
			out = append(out, cbdash.ConfigChange{DependencyKey: k, Instance: ib.Instance, At: ev.At, Previous: *prev, Config: *ib.Config})
		}
	}
	if len(last) > declared {
		// An instance has left the dependency (it is gone: the collector
		// forgot it after its GoneAfter): it is forgotten here too, or
		// a fleet whose instances get new names (a deployment's pods)
		// would grow last without end. One that comes back later is new.
		present := make(map[string]struct{}, declared)
		for _, ib := range ev.Dependency.PerInstance {
			present[ib.Instance] = struct{}{}
		}
		for inst := range last {
			if _, ok := present[inst]; !ok {
				delete(last, inst)
			}
		}
	}
	return out
}

// ConfigDiff lists what changed between two configurations
// ("failure rate threshold 50 → 40; minimum calls 10 → 20"), named after
// the fields of the hello.
func ConfigDiff(a, b protocol.BreakerConfig) string {
	var parts []string
	add := func(name string, x, y any) {
		if x != y {
			parts = append(parts, fmt.Sprintf("%s %v → %v", strings.ReplaceAll(name, "_", " "), x, y))
		}
	}
	add("window_kind", a.WindowKind, b.WindowKind)
	add("window_size", a.WindowSize, b.WindowSize)
	add("window_ms", a.WindowMillis, b.WindowMillis)
	add("window_buckets", a.WindowBuckets, b.WindowBuckets)
	add("failure_rate_threshold", a.FailureRateThreshold, b.FailureRateThreshold)
	add("slow_call_duration_ms", a.SlowCallDurationMillis, b.SlowCallDurationMillis)
	add("slow_call_rate_threshold", a.SlowCallRateThreshold, b.SlowCallRateThreshold)
	add("minimum_calls", a.MinimumCalls, b.MinimumCalls)
	add("open_duration_ms", a.OpenDurationMillis, b.OpenDurationMillis)
	add("open_backoff_multiplier", a.OpenBackoffMultiplier, b.OpenBackoffMultiplier)
	add("open_backoff_max_ms", a.OpenBackoffMaxMillis, b.OpenBackoffMaxMillis)
	add("half_open_max_calls", a.HalfOpenMaxCalls, b.HalfOpenMaxCalls)
	add("half_open_success_threshold", a.HalfOpenSuccessThreshold, b.HalfOpenSuccessThreshold)
	add("call_timeout_ms", a.CallTimeoutMillis, b.CallTimeoutMillis)
	add("max_concurrent", a.MaxConcurrent, b.MaxConcurrent)
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}
