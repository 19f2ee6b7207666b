package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// BenchmarkAgentsReplayTheirBacklogs: n agents each send b.N batches of
// one window report without waiting (a backlog resent after a reconnect)
// and read the acks until their last. It reports batches a second (all
// agents together) and batches per store transaction: a connection has
// at most ingest.SaveQueue batches on their way to the store, so a replay goes
// at that many per group commit, plus whatever the writer waits for
// company that cannot come (every connection's batches are in the group
// already).
func BenchmarkAgentsReplayTheirBacklogs(b *testing.B) {
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			h := startHarness(b, "", nil)
			agents := make([]*rawAgent, n)
			for i := range agents {
				agents[i] = dialRaw(b, h, h.token)
				agents[i].hello(fmt.Sprintf("a%d", i), 1)
			}
			batches := make([][]byte, b.N)
			for i := range b.N {
				data, err := json.Marshal(h.batch(uint64(i+1), 10, 0))
				if err != nil {
					b.Fatal(err)
				}
				batches[i] = data
			}
			txs := h.store.Stats().Transactions
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, a := range agents {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for _, data := range batches {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						err := a.conn.Write(ctx, websocket.MessageText, data)
						cancel()
						if err != nil {
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					for {
						typ, data, err := a.next()
						if err != nil {
							b.Error(err)
							return
						}
						var ack protocol.Ack
						if typ != protocol.TypeAck || json.Unmarshal(data, &ack) != nil {
							b.Errorf("got %s", data)
							return
						}
						if ack.Seq == uint64(b.N) {
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			total := float64(n * b.N)
			b.ReportMetric(total/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(total/float64(h.store.Stats().Transactions-txs), "batches/tx")
			b.ReportMetric(0, "ns/op")
		})
	}
}
