package live

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// BenchmarkComputeView aggregates one dependency of 1,000 instances as a
// publication does, after changed of them reported (their lines are
// rebuilt; the others come from the cache). Every instance reports about
// once a second and a dependency is published up to 4 times a second
// (urgentEvery), so about a quarter of the lines change between two
// publications under load.
func BenchmarkComputeView(b *testing.B) {
	const instances = 1000
	for _, changed := range []int{0, instances / 4, instances} {
		b.Run(fmt.Sprintf("changed=%d", changed), func(b *testing.B) {
			clk := breakertest.NewClock(clocktest.Noon())
			l := newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
			cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
			latency := make([]int64, protocol.NumLatencyBuckets)
			latency[3] = 90
			insts := make([]*instance, instances)
			for i := range insts {
				name := fmt.Sprintf("api-%04d", i)
				l.Hello(testHello("api", name, cfg, map[string]string{"region": "eu", "pod": name}), 0, nil, clk.Now(), nil)
				l.Apply(Key{"api", name}, &protocol.Batch{Seq: 1, Windows: []protocol.Window{
					window("db", protocol.StateClosed, clk.Now(), protocol.Counts{Admitted: 100, Successes: 97, Failures: 3},
						protocol.Headroom{Calls: 100, Failures: 3, MinimumCalls: 10, FailureRate: 3, FailureRateThreshold: 50}, latency),
				}}, clk.Now())
				insts[i] = l.instances[Key{"api", name}]
			}
			d := l.deps[cbdash.DependencyKey{Service: "api", Breaker: "db"}]
			l.mu.Lock()
			defer l.mu.Unlock()
			l.viewLocked(d) // every line cached
			next := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range changed { // what applying their reports does to the cache
					l.bump(insts[next])
					next = (next + 1) % instances
				}
				d.view = nil
				if v := l.viewLocked(d); len(v.PerInstance) != instances {
					b.Fatalf("%d lines", len(v.PerInstance))
				}
			}
		})
	}
}
