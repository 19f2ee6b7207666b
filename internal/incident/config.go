package incident

import (
	"fmt"
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

type instBreaker struct {
	k    cbdash.DependencyKey
	inst string
}

// configWatch notices breaker configurations that change between two
// dependency events (a hello with a new configuration). It does no I/O and
// is not safe for concurrent use.
type configWatch struct {
	last map[instBreaker]protocol.BreakerConfig
}

func newConfigWatch() *configWatch {
	return &configWatch{last: make(map[instBreaker]protocol.BreakerConfig)}
}

// observe returns the changes a dependency event shows; the first
// configuration seen of an instance is not a change.
func (w *configWatch) observe(ev cbdash.Event) []cbdash.ConfigChange {
	if ev.Kind != cbdash.EventDependency || ev.Dependency == nil {
		return nil
	}
	var out []cbdash.ConfigChange
	for _, ib := range ev.Dependency.PerInstance {
		key := instBreaker{ev.Dependency.DependencyKey, ib.Instance}
		prev, seen := w.last[key]
		if ib.Config.Name == "" {
			continue // not declared yet
		}
		w.last[key] = ib.Config
		if seen && prev != ib.Config {
			out = append(out, cbdash.ConfigChange{DependencyKey: key.k, Instance: ib.Instance, At: ev.At, Previous: prev, Config: ib.Config})
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
