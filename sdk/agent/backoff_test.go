package agent_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/agent/agenttest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestFailingBatchesBackOffAlthoughWelcomed: a collector that welcomes the
// agent and then fails every batch (its store cannot commit) sees the
// agent's reconnects slow down exponentially, as if it were down: the
// backoff starts again only after a session that had a batch acknowledged.
// It runs in a synctest bubble: the waits are virtual time, exact.
func TestFailingBatchesBackOffAlthoughWelcomed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOptions{net: agenttest.NewMemNet(), agent: func(c *agent.Config) {
			c.ReconnectMin, c.ReconnectMax = 10*time.Millisecond, 10*time.Second
		}})
		f.col.mu.Lock()
		f.col.beforeStore = func(protocol.Batch) bool { return false } // every batch fails
		f.col.mu.Unlock()
		start := time.Now()
		calls(f.b, 10, true) // trips: a transition to send
		// Waits are random in [d/2, d] for d = 10, 20, 40, 80, 160 ms...: six
		// reconnects take at least 5+10+20+40+80 ms; with the backoff reset
		// at every welcome they would take 6 x [5, 10] ms.
		synctest.Sleep(155*time.Millisecond - time.Nanosecond)
		if n := f.agent.Stats().Reconnects; n >= 6 {
			t.Fatalf("%d reconnects in %v: the backoff did not grow", n, time.Since(start))
		}
		synctest.Sleep(time.Second - 155*time.Millisecond)
		if n := f.agent.Stats().Reconnects; n < 6 {
			t.Fatalf("%d reconnects in %v, want six", n, time.Since(start))
		}
	})
}

// TestRefusedForGoodWaitsTheLongestBackoff: a hello refused for good (a
// fatal error without retry, as a collector answers one over a quota of
// its token or service) is logged as such, and the agent reconnects only
// at the longest backoff (ReconnectMax, jittered down to half of it), not
// from the shortest as after a failure of the collector: a refused fleet
// does not hammer the collector.
// It runs in a synctest bubble: the waits are virtual time, exact.
func TestRefusedForGoodWaitsTheLongestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const longest = 300 * time.Millisecond
		f := newFixture(t, fixtureOptions{net: agenttest.NewMemNet(), noStart: true, agent: func(c *agent.Config) {
			c.ReconnectMin, c.ReconnectMax = time.Millisecond, longest
		}})
		const reason = `service "checkout" has 1000 dependencies; 1 new ones would pass the 1000 one service may have (serve flag --max-dependencies-per-service) (forbidden)`
		f.col.mu.Lock()
		f.col.refuseHello = &protocol.Error{Type: protocol.TypeError, Reason: reason, Fatal: true}
		f.col.mu.Unlock()
		if err := f.agent.Start(); err != nil {
			t.Fatal(err)
		}
		synctest.Sleep(2 * longest) // two waits of at most the longest backoff
		at := f.col.hellosAt()
		if len(at) < 3 {
			t.Fatalf("%d hellos in %v, want 3", len(at), 2*longest)
		}
		for i := 1; i < len(at); i++ {
			// From ReconnectMin it would be 0.5-1 ms, then 1-2 ms.
			if gap := at[i].Sub(at[i-1]); gap < longest/2 {
				t.Errorf("hello %d came %v after the refused one before it, want at least %v (half the longest backoff)", i+1, gap, longest/2)
			}
		}
		if !f.logs.contains("refused this agent for good") || !f.logs.contains("--max-dependencies-per-service") {
			t.Error("the log does not say the refusal is for good, with its reason")
		}
	})
}
