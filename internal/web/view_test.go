package web

import (
	"fmt"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// staleDep is a dependency of service whose instances 1..n are stale
// (of total instances).
func staleDep(service, breaker string, total, n int) cbdash.Dependency {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: service, Breaker: breaker}, Instances: total, Stale: n}
	for i := 1; i <= total; i++ {
		d.PerInstance = append(d.PerInstance, &cbdash.InstanceBreaker{
			Service: service, Instance: fmt.Sprintf("%s-%d", service, i), Breaker: breaker, Stale: i <= n,
		})
	}
	return d
}

func TestFleetCountsDistinctStaleInstances(t *testing.T) {
	t.Parallel()
	deps := []cbdash.Dependency{
		// checkout-1 and checkout-2 are stale: three breakers each.
		staleDep("checkout", "payments", 4, 2),
		staleDep("checkout", "inventory", 4, 2),
		staleDep("checkout", "fraud", 4, 2),
		// search-1 is stale on both its breakers.
		staleDep("search", "index", 3, 1),
		staleDep("search", "ranker", 3, 1),
		staleDep("catalog", "db", 2, 0),
	}
	if got := fleet(deps).StaleInst; got != 3 {
		t.Fatalf("stale instances = %d, want 3 (checkout-1, checkout-2, search-1; not 8 instance x breaker pairs)", got)
	}
	// Without per-instance rows, a service counts as its largest Stale.
	bare := []cbdash.Dependency{
		{DependencyKey: cbdash.DependencyKey{Service: "a", Breaker: "x"}, Instances: 3, Stale: 2},
		{DependencyKey: cbdash.DependencyKey{Service: "a", Breaker: "y"}, Instances: 3, Stale: 1},
	}
	if got := fleet(bare).StaleInst; got != 2 {
		t.Fatalf("stale instances without rows = %d, want 2", got)
	}
}

func TestWindowRatesBelowTheMinimumCallsAreNotJudged(t *testing.T) {
	t.Parallel()
	dep := func(name string, h protocol.Headroom) cbdash.Dependency {
		return cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "s", Breaker: name}, State: protocol.StateClosed, Headroom: h}
	}
	// One failed call of a minimum 20: 100% of 50%, but the breaker cannot open.
	one := dep("one-failure", protocol.Headroom{Calls: 1, Failures: 1, MinimumCalls: 20, FailureRate: 100, FailureRateThreshold: 50})
	// A full window at 40% of 50%: judged, and closer to opening.
	full := dep("full-window", protocol.Headroom{Calls: 40, Failures: 16, MinimumCalls: 20, FailureRate: 40, FailureRateThreshold: 50})

	r, _ := rates(one, nil)
	if r.Level != "idle" || r.Text != "not judged yet (1 of 20 calls)" {
		t.Errorf("one failed call of 20: level %q text %q, want idle and \"not judged yet (1 of 20 calls)\"", r.Level, r.Text)
	}
	if r, _ := rates(full, nil); r.Level != "warn" || r.Text != "40% of 50%" {
		t.Errorf("full window: level %q text %q, want warn and \"40%% of 50%%\"", r.Level, r.Text)
	}
	deps := []cbdash.Dependency{one, full}
	sortDeps(deps, "")
	if deps[0].Breaker != "full-window" {
		t.Errorf("worst first put %s first; the judged window at 80%% of its threshold is closer to opening than 1 call of 20", deps[0].Breaker)
	}
}
