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

// TestRefusedForGoodWaitsTheLongestBackoff: a hello refused for good (a
// fatal error without retry, as a collector answers one over a quota of
// its token or service) is logged as such, and the agent reconnects only
// at the longest backoff (ReconnectMax, jittered down to half of it), not
// from the shortest as after a failure of the collector: a refused fleet
// does not hammer the collector.
func TestRefusedForGoodWaitsTheLongestBackoff(t *testing.T) {
	const longest = 300 * time.Millisecond
	f := newFixture(t, fixtureOptions{noStart: true, agent: func(c *agent.Config) {
		c.ReconnectMin, c.ReconnectMax = time.Millisecond, longest
	}})
	const reason = `service "checkout" has 1000 dependencies; 1 new ones would pass the 1000 one service may have (serve flag --max-dependencies-per-service) (forbidden)`
	f.col.mu.Lock()
	f.col.refuseHello = &protocol.Error{Type: protocol.TypeError, Reason: reason, Fatal: true}
	f.col.mu.Unlock()
	if err := f.agent.Start(); err != nil {
		t.Fatal(err)
	}
	hellos := func() []time.Time {
		f.col.mu.Lock()
		defer f.col.mu.Unlock()
		return append([]time.Time(nil), f.col.helloAt...)
	}
	waitFor(t, 10*time.Second, "three hellos", func() bool { return len(hellos()) >= 3 })
	at := hellos()
	for i := 1; i < len(at); i++ {
		// From ReconnectMin it would be 0.5-1 ms, then 1-2 ms.
		if gap := at[i].Sub(at[i-1]); gap < longest/2 {
			t.Errorf("hello %d came %v after the refused one before it, want at least %v (half the longest backoff)", i+1, gap, longest/2)
		}
	}
	if !f.logs.contains("refused this agent for good") || !f.logs.contains("--max-dependencies-per-service") {
		t.Error("the log does not say the refusal is for good, with its reason")
	}
}
