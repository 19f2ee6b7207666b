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
	// lines are the last event's lines by dependency (the detector keeps
	// the same slice): a line whose instance and configuration pointer
	// are those of the line at its place in the last event is passed
	// over without looking its instance up.
	lines map[cbdash.DependencyKey][]*cbdash.InstanceBreaker
}

func newConfigWatch() *configWatch {
	return &configWatch{last: make(map[cbdash.DependencyKey]map[string]*protocol.BreakerConfig),
		lines: make(map[cbdash.DependencyKey][]*cbdash.InstanceBreaker)}
}

// observe returns the changes a dependency event shows; the first
// configuration seen of an instance is not a change.
func (w *configWatch) observe(ev cbdash.Event) []cbdash.ConfigChange {
	if ev.Kind != cbdash.EventDependency || ev.Dependency == nil {
		return nil
	}
	k := ev.Dependency.DependencyKey
	last := w.last[k]
	if last == nil {
		last = make(map[string]*protocol.BreakerConfig, len(ev.Dependency.PerInstance))
		w.last[k] = last
	}
	var out []cbdash.ConfigChange
	before := w.lines[k]
	w.lines[k] = ev.Dependency.PerInstance
	for i, ib := range ev.Dependency.PerInstance {
		if ib.Config == nil || ib.Config.Name == "" {
			continue // not declared yet
		}
		if i < len(before) && before[i].Config == ib.Config && before[i].Instance == ib.Instance {
			continue // as at its place in the last event, so in last too
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
