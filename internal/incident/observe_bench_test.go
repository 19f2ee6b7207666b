package incident_test

import (
	"fmt"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// BenchmarkObserveDependency: dependency events of 1,000 instances, each
// with a quarter of its lines new (the pace under loadgen: every instance
// reports once a second, a busy dependency is published four times).
func BenchmarkObserveDependency(b *testing.B) {
	d, err := incident.NewDetector(incident.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	// Two read-only lines per instance; each event swaps a quarter of
	// them, so a cycle of 8 events comes back to the first (built before
	// the timer starts).
	var pair [2][n]*cbdash.InstanceBreaker
	for g := range pair {
		for i := range n {
			pair[g][i] = &cbdash.InstanceBreaker{Service: "pay", Instance: fmt.Sprintf("pay-%04d", i), Breaker: "db",
				State: protocol.StateClosed, Last: &protocol.Window{Counts: protocol.Counts{Admitted: int64(g)}}}
		}
	}
	which := make([]int, n)
	var events [8]cbdash.Event
	for e := range events {
		for i := e % 4; i < n; i += 4 {
			which[i] ^= 1
		}
		lines := make([]*cbdash.InstanceBreaker, n)
		for i := range lines {
			lines[i] = pair[which[i]][i]
		}
		events[e] = cbdash.Event{Kind: cbdash.EventDependency, At: clocktest.Epoch(), Dependency: &cbdash.Dependency{
			DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "db"}, Instances: n, PerInstance: lines}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for it := range b.N {
		d.Observe(events[it%len(events)])
	}
}
