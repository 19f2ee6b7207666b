package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// The hot path of a call through a breaker, alone and with an agent
// reporting it: to a collector that stores everything, and to one that
// welcomes the agent and then never reads (the agent's writes block, its
// buffer fills). Reports run on the real clock, every 10ms, so the agent
// reads snapshots throughout. Compare ns/op side by side:
//
//	go test -run '^$' -bench 'Breaker' -benchmem ./agent/
func BenchmarkBreakerAlone(b *testing.B) {
	br := benchBreaker(b)
	benchCalls(b, br)
}

func BenchmarkBreakerWithAgent(b *testing.B) {
	for _, c := range []struct {
		name string
		mode collectorMode
	}{{"collector reads", normal}, {"collector never reads", welcomeThenSilent}} {
		b.Run(c.name, func(b *testing.B) {
			br := benchBreaker(b)
			col := newCollector(b)
			col.mode = c.mode
			a, err := agent.New(agent.Config{URL: col.url(), Token: col.token, Service: "bench",
				ReportInterval: 10 * time.Millisecond, BufferBytes: 256 << 10})
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Register(br); err != nil {
				b.Fatal(err)
			}
			if err := a.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = a.Close(ctx)
			})
			waitFor(b, 5*time.Second, "the agent to connect", col.connected)
			benchCalls(b, br)
			b.StopTimer()
			b.ReportMetric(float64(a.Stats().BufferedBytes), "buffered-bytes")
		})
	}
}

func benchBreaker(b *testing.B) *breaker.Breaker {
	b.Helper()
	br, err := breaker.New("bench", breaker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func benchCalls(b *testing.B, br *breaker.Breaker) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_ = br.Execute(ctx, fn)
	}
}
