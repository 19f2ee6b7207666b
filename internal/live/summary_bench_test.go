package live

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// BenchmarkSummaries takes a clustered collector's summaries as its
// fleet does once a second (internal/collector: summaryLoop) while it
// serves 500 instances of 20 breakers each (20 dependencies of 500
// members, one window report of every member a second; one instance in
// 50 tripped): an op is one second, the summaries taken after its
// reports (applied outside the timer). views=true has the views computed
// (Flush) between the reports and the summaries, as when the publisher
// runs first.
func BenchmarkSummaries(b *testing.B) {
	for _, views := range []bool{false, true} {
		b.Run(fmt.Sprintf("views=%v", views), func(b *testing.B) { benchmarkSummaries(b, views) })
	}
}

func benchmarkSummaries(b *testing.B, views bool) {
	const deps, instances = 20, 500
	clk := breakertest.NewClock(clocktest.Noon())
	l := newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
	latency := make([]int64, protocol.NumLatencyBuckets)
	latency[3] = 90
	cfgs := make([]protocol.BreakerConfig, deps)
	for j := range cfgs {
		cfgs[j] = protocol.BreakerConfig{Name: fmt.Sprintf("dep-%02d", j), WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	}
	keys := make([]Key, instances)
	for i := range keys {
		keys[i] = Key{"api", fmt.Sprintf("api-%04d", i)}
		h := testHello("api", keys[i].Instance, cfgs[0], map[string]string{"region": "eu", "zone": fmt.Sprintf("eu-%d", i%3), "version": "1.4.2", "pod": keys[i].Instance})
		h.Breakers = cfgs
		l.Hello(h, 0, nil, clk.Now(), nil)
	}
	seq := uint64(0)
	second := func() {
		clk.Advance(time.Second)
		seq++
		now := clk.Now()
		for i, k := range keys {
			state, c := protocol.StateClosed, protocol.Counts{Admitted: 100, Successes: 97, Failures: 3}
			bt := &protocol.Batch{Seq: seq, Windows: make([]protocol.Window, deps)}
			if i%50 == 0 {
				state, c = protocol.StateOpen, protocol.Counts{RejectedOpen: 100}
				if seq == 1 {
					for j := range cfgs {
						bt.Transitions = append(bt.Transitions, protocol.Transition{Breaker: cfgs[j].Name, From: protocol.StateClosed, To: protocol.StateOpen,
							At: now.UnixMilli() - 500, Generation: 1, Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}})
					}
				}
			}
			for j := range cfgs {
				bt.Windows[j] = window(cfgs[j].Name, state, now, c,
					protocol.Headroom{Calls: 100, Failures: 3 + int64(j), MinimumCalls: 10, FailureRate: 3, FailureRateThreshold: 50}, latency)
			}
			l.ApplyNow(Update{Key: k, Batch: bt, At: now})
		}
		if views {
			l.Flush()
		}
	}
	second()
	if got := len(l.Summaries(true)); got != deps {
		b.Fatalf("%d summaries, want %d", got, deps)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		second()
		b.StartTimer()
		if got := l.Summaries(false); len(got) != deps || got[0].Instances != instances {
			b.Fatalf("%d summaries, want %d of %d instances", len(got), deps, instances)
		}
	}
}
