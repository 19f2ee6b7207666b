package store

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// BenchmarkSequentialWriters: n writers (HTTP agents, each waiting for
// its batch's commit before sending the next) save batches of one
// window report in turn. It reports batches a second and batches per
// transaction: writers that all wait for the group they are in can send
// nothing more, so any wait for company (groupIdle, groupIdleMany) is
// paid in full by each round.
func BenchmarkSequentialWriters(b *testing.B) {
	for _, n := range []int{1, 4, 15, 16, 32} {
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) {
			s, err := Open(context.Background(), testDSN(b, "w.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			t0 := clocktest.Epoch()
			var wg sync.WaitGroup
			per := b.N/n + 1
			txs := s.Stats().Transactions
			b.ResetTimer()
			for g := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						bt := protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli() + int64(i)*1000, Millis: 1000,
							State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 10, Successes: 10}}}}
						if _, err := s.SaveBatch(context.Background(), "pay", fmt.Sprintf("pay-%d", g), 1, bt, t0); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			total := float64(per * n)
			b.ReportMetric(total/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(total/float64(s.Stats().Transactions-txs), "batches/tx")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// allFull: a group waits for company unless every op is a batch of a stream
// that hands nothing more before one of its ops is done (one full op of
// the stream is enough: the others are its earlier ones).
func TestAGroupOfFullStreamsDoesNotWait(t *testing.T) {
	t.Parallel()
	a, b := new(Stream), new(Stream)
	tests := []struct {
		name  string
		group []*op
		want  bool
	}{
		{"one stream, its last op full", []*op{{stream: a}, {stream: a}, {stream: a, full: true}}, true},
		{"two streams, both full", []*op{{stream: a}, {stream: b, full: true}, {stream: a, full: true}}, true},
		{"a stream with room", []*op{{stream: a, full: true}, {stream: b}}, false},
		{"an op of no stream (a waiting caller)", []*op{{stream: a, full: true}, {}}, false},
		{"no stream at all", []*op{{}, {}}, false},
	}
	for _, tt := range tests {
		if got := allFull(tt.group); got != tt.want {
			t.Errorf("%s: allFull = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// waits: a group of several ops waits for company unless none can come
// (allFull) or one of them is prompt (a hello whose agent waits for its
// welcome, a hold's deliveries): those were kept up to groupWait.
func TestAGroupWithAPromptOpDoesNotWait(t *testing.T) {
	a := new(Stream)
	tests := []struct {
		name  string
		group []*op
		want  bool
	}{
		{"a stream with room", []*op{{stream: a}, {stream: a}}, true},
		{"callers, none prompt", []*op{{}, {}}, true},
		{"a hello among callers", []*op{{}, {prompt: true}}, false},
		{"a hello among a stream's batches", []*op{{stream: a}, {prompt: true}, {stream: a}}, false},
		{"full streams", []*op{{stream: a, full: true}, {stream: a}}, false},
	}
	for _, tt := range tests {
		if got := waits(tt.group); got != tt.want {
			t.Errorf("%s: waits = %v, want %v", tt.name, got, tt.want)
		}
	}
}
