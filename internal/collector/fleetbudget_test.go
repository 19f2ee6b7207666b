package collector

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cbdash/cbdash/internal/cluster"
)

// stuckBus is a bus with a peer whose NOTIFY never returns: the
// publisher's first message waits until the test ends.
type stuckBus struct {
	cluster.Bus
	publishing chan struct{} // closed at the first Publish
	once       sync.Once
}

func (b *stuckBus) Peers() int { return 1 }

func (b *stuckBus) Publish(ctx context.Context, _ string, _ []byte) error {
	b.once.Do(func() { close(b.publishing) })
	<-ctx.Done()
	return ctx.Err()
}

// TestThePublisherQueueHoldsAtMostItsBytes: with the bus stuck (a
// database that does not take the NOTIFY, the other collectors behind),
// updates of 4 KB keep coming; the queue to the bus holds at most
// fleetQueueBytes of them (under its 8,192 updates, which would be 32 MB
// of these), and those beyond are dropped and counted.
func TestThePublisherQueueHoldsAtMostItsBytes(t *testing.T) {
	bus := &stuckBus{publishing: make(chan struct{})}
	f := newFleet(&Collector{log: slog.New(slog.NewTextHandler(io.Discard, nil))}, bus, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.publishLoop(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	big := strings.Repeat("s", 4000)
	f.enqueue(fleetUpdate{Kind: updHello, Service: big, Instance: "i0"})
	<-bus.publishing
	const n = 2 * fleetQueue
	for i := range n {
		f.enqueue(fleetUpdate{Kind: updHello, Service: big, Instance: "i"})
		if q := f.budget.queued.Load(); q > fleetQueueBytes {
			t.Fatalf("after %d updates the queue holds %d bytes, over %d", i+1, q, fleetQueueBytes)
		}
	}
	queued, dropped := len(f.out), f.dropped.Load()
	if queued >= fleetQueue || dropped != int64(n-queued) {
		t.Fatalf("%d updates queued, %d dropped of %d: want the byte bound to bind before the %d updates", queued, dropped, n, fleetQueue)
	}
	t.Logf("%d updates (%d bytes) queued, %d dropped", queued, f.budget.queued.Load(), dropped)
}
