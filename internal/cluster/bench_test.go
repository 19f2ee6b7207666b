package cluster_test

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// BenchmarkPublishToAnotherNode measures the fan-out from one node to
// another through PostgreSQL: each op is one Publish on a, and the
// benchmark ends when b has received them all (so ns/op is the sustained
// rate, not the publish call alone). Sizes: a small event inline, and one
// over NOTIFY's limit sent by reference.
func BenchmarkPublishToAnotherNode(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"inline-512B", 512}, {"by-reference-20KiB", 20 << 10}} {
		b.Run(c.name, func(b *testing.B) {
			db := benchDatabase(b)
			pa, pb := openB(b, db, "a"), openB(b, db, "b")
			msgs, cancel := pb.Subscribe("events")
			defer cancel()
			payload := bytes.Repeat([]byte("x"), c.size)
			ctx := context.Background()
			b.SetBytes(int64(c.size))
			b.ResetTimer()
			done := make(chan int)
			go func() {
				n := 0
				timeout := time.NewTimer(time.Minute)
				defer timeout.Stop()
				for n < b.N {
					select {
					case <-msgs:
						n++
					case <-timeout.C:
						done <- n
						return
					}
				}
				done <- n
			}()
			for range b.N {
				if err := pa.Publish(ctx, "events", payload); err != nil {
					b.Fatal(err)
				}
			}
			if n := <-done; n != b.N {
				b.Fatalf("b received %d of %d", n, b.N)
			}
		})
	}
}
