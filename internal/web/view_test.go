package web

import (
	"fmt"
	"testing"

	"github.com/cbdash/cbdash"
)

// staleDep is a dependency of service whose instances 1..n are stale
// (of total instances).
func staleDep(service, breaker string, total, n int) cbdash.Dependency {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: service, Breaker: breaker}, Instances: total, Stale: n}
	for i := 1; i <= total; i++ {
		d.PerInstance = append(d.PerInstance, cbdash.InstanceBreaker{
			Service: service, Instance: fmt.Sprintf("%s-%d", service, i), Breaker: breaker, Stale: i <= n,
		})
	}
	return d
}

func TestFleetCountsDistinctStaleInstances(t *testing.T) {
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
