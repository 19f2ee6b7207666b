package agent_test

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestFailingBatchesBackOffAlthoughWelcomed: a collector that welcomes the
// agent and then fails every batch (its store cannot commit) sees the
// agent's reconnects slow down exponentially, as if it were down: the
// backoff starts again only after a session that had a batch acknowledged.
func TestFailingBatchesBackOffAlthoughWelcomed(t *testing.T) {
	f := newFixture(t, fixtureOptions{agent: func(c *agent.Config) {
		c.ReconnectMin, c.ReconnectMax = 10*time.Millisecond, 10*time.Second
	}})
	f.col.mu.Lock()
	f.col.beforeStore = func(protocol.Batch) bool { return false } // every batch fails
	f.col.mu.Unlock()
	start := time.Now()
	calls(f.b, 10, true) // trips: a transition to send
	waitFor(t, 10*time.Second, "six reconnects", func() bool { return f.agent.Stats().Reconnects >= 6 })
	// Waits are random in [d/2, d] for d = 10, 20, 40, 80, 160 ms...: six
	// reconnects take at least 5+10+20+40+80 ms; with the backoff reset at
	// every welcome they would take 6 x [5, 10] ms.
	if elapsed := time.Since(start); elapsed < 155*time.Millisecond {
		t.Fatalf("six reconnects in %v: the backoff did not grow", elapsed)
	}
}
