package live

import (
	"maps"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// nopConn is a websocket session that sends nowhere.
type nopConn struct{}

func (nopConn) Send(any)  {}
func (nopConn) Replaced() {}

func (nopConn) Quiet() <-chan struct{} { return nil }

// movedSetup: collector B serves x (open) and y (closed) and has
// claimed them on the bus; A holds B's summary of them. It returns A, B,
// B's summary sync and x's stored line.
func movedSetup(t *testing.T) (a, b *State, sync func(), stored []cbdash.InstanceBreaker, c *breakertest.Clock) {
	t.Helper()
	a, c = newTestLive(t)
	b = newLive(c.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	for _, inst := range []string{"x", "y"} {
		b.Hello(testHello("api", inst, cfg, nil), 0, nopConn{}, c.Now(), nil)
		a.RemoteClaim("B", Key{"api", inst})
	}
	c.Advance(time.Second)
	trip := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: c.Now().UnixMilli(), Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}}
	b.Apply(Key{"api", "x"}, &protocol.Batch{Seq: 1, Transitions: []protocol.Transition{trip}, Windows: []protocol.Window{
		window("db", protocol.StateOpen, c.Now(), protocol.Counts{Admitted: 10, Failures: 10}, protocol.Headroom{}, nil)}}, c.Now())
	b.Apply(Key{"api", "y"}, &protocol.Batch{Seq: 1, Windows: []protocol.Window{
		window("db", protocol.StateClosed, c.Now(), protocol.Counts{Admitted: 10, Successes: 10}, protocol.Headroom{}, nil)}}, c.Now())
	sync = func() {
		for _, s := range b.Summaries(true) {
			a.ApplySummary("B", s)
		}
	}
	sync()
	stored = []cbdash.InstanceBreaker{{Service: "api", Instance: "x", Breaker: "db", State: protocol.StateOpen,
		LastTransition: c.Now(), LastSeen: c.Now()}}
	return a, b, sync, stored, c
}

// counted fails unless A's view of api/db counts n instances, by state
// want.
func counted(t *testing.T, a *State, what string, n int, want map[string]int) {
	t.Helper()
	d, _ := a.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if d.Instances != n || !maps.Equal(d.ByState, want) {
		t.Fatalf("%s: A counts %d instances, by state %v; want %d, %v", what, d.Instances, d.ByState, n, want)
	}
}

// TestAnInstanceThatMovesHereIsCountedOnce: x, counted (open) in B's
// summary, says hello to A: A counts it once (its own line, open from the
// store), not once more in B's summary, before and after B's next
// summary (which no longer counts it).
func TestAnInstanceThatMovesHereIsCountedOnce(t *testing.T) {
	t.Parallel()
	a, b, sync, stored, clk := movedSetup(t)
	both := map[string]int{protocol.StateOpen: 1, protocol.StateClosed: 1}
	counted(t, a, "B's summary", 2, both)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "x", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	if d, _ := a.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"}); d.Instances != 2 {
		t.Fatalf("x's hello on A, before the seed: A counts %d instances, want 2", d.Instances)
	}
	a.Seed(stored)
	counted(t, a, "x's hello on A", 2, both)

	// B's session of x ends and A's claim reaches B: its next summary
	// counts y only.
	b.Disconnect(Key{"api", "x"}, nopConn{})
	b.RemoteClaim("A", Key{"api", "x"})
	clk.Advance(time.Second)
	sync()
	counted(t, a, "B's next summary", 2, both)
}

// TestAnInstanceOfADeadCollectorIsCountedOnce: B dies (no further
// summary); x, which it counted, says hello to A: A counts it once until
// B's part goes (KeepSources), then once still (y counts no more: it
// reconnects somewhere and is counted there).
func TestAnInstanceOfADeadCollectorIsCountedOnce(t *testing.T) {
	t.Parallel()
	a, _, _, stored, clk := movedSetup(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "x", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	a.Seed(stored)
	both := map[string]int{protocol.StateOpen: 1, protocol.StateClosed: 1}
	counted(t, a, "x's hello on A", 2, both)
	clk.Advance(RemoteExpiry / 2)
	a.Sweep()
	counted(t, a, "B's part still held", 2, both)
	a.KeepSources(nil, time.Second)
	counted(t, a, "B's part dropped", 1, map[string]int{protocol.StateOpen: 1})
	if len(a.claimedBy) != 0 {
		t.Fatalf("A remembers %d claims of a collector gone, want none", len(a.claimedBy))
	}
}

// TestAnInstanceThatMovesAwayIsForgottenAtItsDisconnect: x's new session
// on B says hello (B's claim reaches A) before its session on A ends:
// A's line of x goes when that session ends, not when it turns stale.
func TestAnInstanceThatMovesAwayIsForgottenAtItsDisconnect(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	var s nopConn
	a.Hello(testHello("api", "x", cfg, nil), 0, s, clk.Now(), nil)
	if ss := a.Summaries(false); len(ss) != 1 || ss[0].Instances != 1 {
		t.Fatalf("A's summaries with x: %+v, want one of one instance", ss)
	}
	a.RemoteClaim("B", Key{"api", "x"})
	if a.InstancesHeld() != 1 {
		t.Fatalf("claimed by B while connected here: A holds %d instances, want 1", a.InstancesHeld())
	}
	a.Disconnect(Key{"api", "x"}, s)
	if a.InstancesHeld() != 0 {
		t.Fatalf("its session here ended: A holds %d instances, want 0 (B counts it)", a.InstancesHeld())
	}
	if ss := a.Summaries(false); len(ss) != 1 || ss[0].Instances != 0 {
		t.Fatalf("A's summaries after x left: %+v, want one of no instance", ss)
	}
}

// TestAnInstanceThatMovesAwayIsCountedOnce: x, served by A (open), moves
// to B: its session on A ends, then B's claim reaches A. A counts it
// once, in B's part, in the state it had here, until B's next summary
// (which counts it); before, A forgot it at the claim and counted it
// nowhere until then.
func TestAnInstanceThatMovesAwayIsCountedOnce(t *testing.T) {
	t.Parallel()
	a, clk := newTestLive(t)
	b := newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	trip := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(), Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}}
	a.Hello(testHello("api", "x", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	a.Apply(Key{"api", "x"}, &protocol.Batch{Seq: 1, Transitions: []protocol.Transition{trip}, Windows: []protocol.Window{
		window("db", protocol.StateOpen, clk.Now(), protocol.Counts{Admitted: 10, Failures: 10}, protocol.Headroom{}, nil)}}, clk.Now())
	b.Hello(testHello("api", "y", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	for _, s := range b.Summaries(true) {
		a.ApplySummary("B", s)
	}
	both := map[string]int{protocol.StateOpen: 1, protocol.StateClosed: 1}
	counted(t, a, "x on A, y on B", 2, both)

	a.Disconnect(Key{"api", "x"}, nopConn{})
	clk.Advance(time.Second)
	b.Hello(testHello("api", "x", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	b.Seed([]cbdash.InstanceBreaker{{Service: "api", Instance: "x", Breaker: "db", State: protocol.StateOpen, LastTransition: clk.Now(), LastSeen: clk.Now()}})
	a.RemoteClaim("B", Key{"api", "x"})
	if a.InstancesHeld() != 0 {
		t.Fatalf("A holds %d instances after B's claim of x, want 0", a.InstancesHeld())
	}
	counted(t, a, "B's claim of x", 2, both)
	for _, s := range b.Summaries(false) {
		a.ApplySummary("B", s)
	}
	counted(t, a, "B's next summary", 2, both)
}

// TestASeededClaimCountsAMovedInstanceOnce: A starts after B claimed x and
// y (it heard no claim: it reads them, SeedClaims), then x moves to A:
// A counts x once, as if it had heard B's claim; a claim of an instance
// served here is not seeded, and a claim heard on the bus is not
// overwritten by an older one read.
func TestASeededClaimCountsAMovedInstanceOnce(t *testing.T) {
	t.Parallel()
	a, _, _, stored, clk := movedSetup(t)
	clear(a.claimedBy) // as if A had started after B's claims
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	a.Hello(testHello("api", "z", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	a.RemoteClaim("C", Key{"api", "w"})
	a.SeedClaims(map[Key]string{{"api", "x"}: "B", {"api", "y"}: "B", {"api", "z"}: "B", {"api", "w"}: "B"})
	if a.claimedBy[Key{"api", "z"}] != "" || a.claimedBy[Key{"api", "w"}] != "C" {
		t.Fatalf("claims %v: z is served here (not seeded), w's heard claim is C's", a.claimedBy)
	}
	a.Hello(testHello("api", "x", cfg, nil), 0, nopConn{}, clk.Now(), nil)
	a.Seed(stored)
	counted(t, a, "x's hello on A", 3, map[string]int{protocol.StateOpen: 1, protocol.StateClosed: 2})
}
