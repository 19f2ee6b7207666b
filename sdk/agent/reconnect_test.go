package agent_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/agent/agenttest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestRetryAfterIsHonoured: a fatal error with retry carrying
// retry_after_ms (a collector whose store cannot commit) brings the agent
// back within [retry_after_ms, 1.5*retry_after_ms], not after its own
// backoff (here at least 2.5 s: ReconnectMin 5 s jittered down to half),
// and again on every such error: the backoff does not grow for them. Both
// where the collector says it: answering the hello, and answering a batch
// (which is then stored once when the store is back). Each case runs in a
// synctest bubble: the waits are virtual time, measured exactly.
func TestRetryAfterIsHonoured(t *testing.T) {
	const hint = 200 // ms
	shortestBackoff := 2500 * time.Millisecond
	refusal := &protocol.Error{Type: protocol.TypeError, Reason: "collector could not store batch 1; retry later",
		Fatal: true, Retry: true, RetryAfterMillis: hint}
	checkGaps := func(t *testing.T, at []time.Time) {
		t.Helper()
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			t.Logf("hello %d came %v after the one before it", i+1, gap)
			if gap < hint*time.Millisecond || gap >= shortestBackoff {
				t.Errorf("hello %d came %v after the refused one before it, want within [%v, %v) (the hint, not the backoff)",
					i+1, gap, hint*time.Millisecond, shortestBackoff)
			}
		}
	}
	slowBackoff := func(c *agent.Config) { c.ReconnectMin, c.ReconnectMax = 5*time.Second, 10*time.Second }
	// Three waits of at most 1.5 x the hint bring four hellos.
	const fourHellos = 3 * hint * 3 / 2 * time.Millisecond

	t.Run("at hello", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{net: agenttest.NewMemNet(), noStart: true, agent: slowBackoff})
			f.col.set(func(c *collector) { c.refuseHello = refusal })
			if err := f.agent.Start(); err != nil {
				t.Fatal(err)
			}
			synctest.Sleep(fourHellos)
			if n := len(f.col.hellosAt()); n < 4 {
				t.Fatalf("%d hellos within %v, want 4", n, fourHellos)
			}
			checkGaps(t, f.col.hellosAt()[:4])
		})
	})

	t.Run("to the same collector", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// With several collectors the agent comes back to the one that
			// asked (over a shared database its store's trouble is every
			// collector's): the other one sees no hello, for five in a row.
			n := agenttest.NewMemNet()
			a, b := newMemCollector(t, n), newMemCollector(t, n)
			a.set(func(c *collector) { c.refuseHello = refusal })
			b.set(func(c *collector) { c.refuseHello = refusal })
			f := newFixture(t, fixtureOptions{net: n, noStart: true, agent: func(c *agent.Config) {
				slowBackoff(c)
				c.URL, c.URLs = "", []string{a.url(), b.url()}
			}})
			if err := f.agent.Start(); err != nil {
				t.Fatal(err)
			}
			synctest.Sleep(fourHellos)
			if na, nb := len(a.hellosAt()), len(b.hellosAt()); na+nb < 4 || (na != 0 && nb != 0) {
				t.Fatalf("hellos: %d to one collector, %d to the other; want four or more, every one to the collector that asked the agent back", na, nb)
			}
			// But not for ever: after five in a row it tries the next one (a
			// collector cut off from a database the others reach).
			first, second := a, b
			if len(b.hellosAt()) > 0 {
				first, second = b, a
			}
			// The fifth hello comes at most 4 x 300 ms after the first,
			// the next one 300 ms later; the second collector's fifth
			// (after which the agent would go back) at least 4 x 200 ms
			// after its first.
			synctest.Sleep(5*hint*3/2*time.Millisecond - fourHellos)
			if len(second.hellosAt()) == 0 {
				t.Fatalf("no hello to the other collector after %d to the first", len(first.hellosAt()))
			}
			if n := len(first.hellosAt()); n != 5 {
				t.Fatalf("the agent tried the other collector after %d hellos to the first, want 5", n)
			}
		})
	})

	t.Run("on a batch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{net: agenttest.NewMemNet(), agent: slowBackoff})
			f.col.set(func(c *collector) { c.storeError = refusal })
			calls(f.b, 3, false)
			f.tick() // one batch, answered by the error and resent at every welcome
			synctest.Sleep(fourHellos)
			if n := len(f.col.hellosAt()); n < 4 {
				t.Fatalf("%d hellos within %v of the refused batch, want 4", n, fourHellos)
			}
			checkGaps(t, f.col.hellosAt()[:4])
			f.col.set(func(c *collector) { c.storeError = nil })
			synctest.Sleep(hint * 3 / 2 * time.Millisecond) // the next hello's wait at most
			f.close(t)
			if sum, _ := f.col.sum("payments"); sum.Successes != 3 || len(f.col.batches()) != 1 {
				t.Fatalf("stored %d batches with %+v, want the one batch of 3 successes once", len(f.col.batches()), sum)
			}
		})
	})
}

// TestCollectorStartedAfterTheAgentIsReachedQuickly: an agent whose
// collector is not listening yet (connection refused) retries within a
// second whatever its backoff (here ReconnectMin is 10 s), warns once and
// then once per 30 s of its clock with the count, and is connected within
// a second of the collector listening (the refused-dial cap), not after
// the backoff's shortest wait, 5 s. It runs in a synctest bubble: the
// retries' waits are virtual time, measured exactly.
func TestCollectorStartedAfterTheAgentIsReachedQuickly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials atomic.Int64
		n := agenttest.NewMemNet()
		f := newFixture(t, fixtureOptions{net: n, noStart: true, agent: func(c *agent.Config) {
			c.ReconnectMin, c.ReconnectMax = 10*time.Second, 30*time.Second
			c.HTTPClient = &http.Client{Transport: &http.Transport{
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return n.Dial(ctx, network, addr)
				},
			}}
		}})
		f.col.stop()
		if err := f.agent.Start(); err != nil {
			t.Fatal(err)
		}
		synctest.Sleep(2 * time.Second) // waits of at most a second
		if d := dials.Load(); d < 3 {
			t.Fatalf("%d refused dials in 2 s, want at least 3 (one a second at most)", d)
		}
		if n := f.logs.count("collector connection lost, retrying"); n != 1 || f.logs.contains("still failing") {
			t.Fatalf("%d warnings for the first failures, want 1 (then one per 30 s):\n%s", n, f.logs.String())
		}
		synctest.Sleep(30 * time.Second)
		if !f.logs.contains("collector connection still failing") || !f.logs.contains("failures_since_last_warning=") {
			t.Fatalf("no warning 30 s later with the count:\n%s", f.logs.String())
		}
		f.col.restart()
		synctest.Sleep(time.Second) // the refused-dial cap: the longest wait now
		if !f.col.connected() {
			t.Fatalf("not connected a second after the collector listened (%d dials), want within the refused-dial cap (1 s), well before the backoff's 5 s", dials.Load())
		}
	})
}

// failbackFixture is an agent given two collectors and connected to the
// one that is not its preferred one: it started on the preferred one
// (pref), which then died (with nothing unacknowledged, so that no batch
// is stored by both: each fake collector has its own store) and came back
// on the same address, not ready until a test says so. It is made in a
// synctest bubble, on an in-memory network: the checks of the preferred
// collector, the reports and FailbackAfter are virtual time.
type failbackFixture struct {
	*fixture
	pref, other *collector
	start       time.Time // when the agent reached other
}

func newFailbackFixture(t *testing.T, failbackAfter time.Duration) *failbackFixture {
	n := agenttest.NewMemNet()
	a, b := newMemCollector(t, n), newMemCollector(t, n)
	f := newFixture(t, fixtureOptions{net: n, noStart: true, agent: func(c *agent.Config) {
		c.URL, c.URLs = "", []string{a.url(), b.url()}
		c.FailbackAfter = failbackAfter
	}})
	if err := f.agent.Start(); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if !f.agent.Stats().Connected {
		t.Fatal("the agent did not connect at its start")
	}
	ff := &failbackFixture{fixture: f, pref: a, other: b}
	if f.agent.Stats().Collector == b.url() {
		ff.pref, ff.other = b, a
	}
	calls(f.b, 2, false)
	f.tick()
	if s := f.agent.Stats(); s.Acked != 1 || s.Sent != 1 {
		t.Fatalf("after the first report: %+v, want one batch sent and acknowledged", s)
	}
	ff.pref.stop()
	synctest.Sleep(100 * time.Millisecond) // ReconnectMax (50 ms) twice: a refused dial, then the other collector
	if got := f.agent.Stats().Collector; got != ff.other.url() {
		t.Fatalf("the agent is on %q after its preferred collector died, want the other one", got)
	}
	ff.pref.restart()
	ff.start = f.now()
	return ff
}

// step runs one call and one report tick (a second of virtual time).
func (f *failbackFixture) step() {
	calls(f.b, 1, false)
	f.tick()
}

// checkDelivery checks that the two collectors together stored every
// call once: the sequence numbers they stored are 1..n, none twice.
func (f *failbackFixture) checkDelivery(t *testing.T, calls int64) {
	t.Helper()
	seen := map[uint64]string{}
	var max uint64
	for _, c := range []*collector{f.pref, f.other} {
		for _, b := range c.batches() {
			if prev, ok := seen[b.Seq]; ok {
				t.Errorf("batch %d stored by %s and by %s", b.Seq, prev, c.url())
			}
			seen[b.Seq] = c.url()
			max = maxOf(max, b.Seq)
		}
	}
	if uint64(len(seen)) != max {
		t.Errorf("stored %d distinct batches, numbered up to %d: some were lost", len(seen), max)
	}
	p, _ := f.pref.sum("payments")
	o, _ := f.other.sum("payments")
	if p.Successes+o.Successes != calls || p.Failures+o.Failures != 0 {
		t.Errorf("the collectors stored %+v and %+v, want %d successes in all", p, o, calls)
	}
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// TestFailbackToThePreferredCollector: connected to the other collector,
// the agent checks its preferred one's /readyz; while it is not ready, or
// ready for less than FailbackAfter, the agent stays; then it stops
// writing, waits for the other collector to acknowledge what it was sent
// (held here until the test releases it), closes that connection with
// 1000 and connects to the preferred one. Nothing is lost or stored twice
// across the move.
func TestFailbackToThePreferredCollector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const after = 30 * time.Second
		f := newFailbackFixture(t, after)
		total := int64(2)
		for range 20 { // not ready: 404
			f.step()
			total++
		}
		// The check is due within the 20 s (every 7.5-12.5 s).
		if f.pref.readyzCount() == 0 {
			t.Fatal("no check of the preferred collector in 20 s (every 7.5-12.5 s)")
		}
		if got := f.agent.Stats().Collector; got != f.other.url() {
			t.Fatalf("the agent moved to %s while the preferred collector was not ready", got)
		}

		release := make(chan struct{})
		var once sync.Once
		releaseAcks := func() { once.Do(func() { close(release) }) }
		t.Cleanup(releaseAcks)
		readySince := f.now()
		f.pref.set(func(c *collector) { c.readyz = func() int { return http.StatusOK } })
		holding := false
		for {
			elapsed := f.now().Sub(readySince)
			// The other collector stops acknowledging 5 s before the
			// agent may move back (it decides at a check, every 7.5-12.5
			// s): what it was sent in those seconds is owed when the agent
			// decides, for less than the 30 s after which an agent takes
			// a collector that does not acknowledge for dead.
			if !holding && elapsed >= after-5*time.Second {
				f.other.set(func(c *collector) { c.afterStore = func(protocol.Batch) bool { <-release; return true } })
				holding = true
			}
			if f.logs.contains("moving back to it") {
				if elapsed < after {
					t.Fatalf("the agent decided to move back %v after the preferred collector became ready, want at least %v", elapsed, after)
				}
				break
			}
			if elapsed > after+40*time.Second {
				t.Fatalf("the agent has not moved back %v after the preferred collector became ready (%d checks):\n%s", elapsed, f.pref.readyzCount(), f.logs.String())
			}
			f.step()
			total++
		}
		t.Logf("decided to move back %v after the preferred collector became ready, after %d checks",
			f.now().Sub(readySince), f.pref.readyzCount())
		// Draining: still on the other collector, which owes acknowledgements.
		if s := f.agent.Stats(); s.Collector != f.other.url() || f.pref.connected() || s.Acked >= s.Sent {
			t.Fatalf("the agent left before the other collector acknowledged what it was sent: %+v", s)
		}
		releaseAcks()
		synctest.Wait()
		if got := f.agent.Stats().Collector; got != f.pref.url() {
			t.Fatalf("the agent is on %q once the other collector acknowledged, want the preferred one", got)
		}
		if st := f.other.closeStatuses(); len(st) == 0 || st[0] != websocket.StatusNormalClosure {
			t.Fatalf("the other collector's connection closed with %v, want normal closure (1000)", st)
		}
		for range 3 {
			f.step()
			total++
		}
		f.close(t)
		f.checkDelivery(t, total)
	})
}

// TestNoFailbackWhileThePreferredCollectorFlaps: a preferred collector that
// answers ready twice and then not ready, again and again, never has the
// agent move back; once it stays ready, the agent moves.
func TestNoFailbackWhileThePreferredCollectorFlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailbackFixture(t, 30*time.Second)
		var n int
		f.pref.set(func(c *collector) {
			c.readyz = func() int { // under c.mu
				n++
				if n%3 == 0 {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			}
		})
		total := int64(2)
		for range 150 {
			f.step()
			total++
		}
		if hits := f.pref.readyzCount(); hits < 10 || f.logs.contains("moving back") || f.agent.Stats().Collector != f.other.url() {
			t.Fatalf("after %d checks of a flapping collector the agent is on %q (moving back logged: %v)",
				hits, f.agent.Stats().Collector, f.logs.contains("moving back"))
		}
		f.pref.set(func(c *collector) { c.readyz = func() int { return http.StatusOK } })
		for i := 0; f.agent.Stats().Collector != f.pref.url(); i++ {
			if i > 80 {
				t.Fatal("the agent did not move back 80 s after the preferred collector stopped flapping")
			}
			f.step()
			total++
		}
		f.close(t)
		f.checkDelivery(t, total)
	})
}

// TestFailbackDisabled: with a negative FailbackAfter the agent never
// checks its preferred collector and stays where it is.
func TestFailbackDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailbackFixture(t, -1)
		f.pref.set(func(c *collector) { c.readyz = func() int { return http.StatusOK } })
		for range 100 {
			f.step()
		}
		if hits, s := f.pref.readyzCount(), f.agent.Stats(); hits != 0 || s.Collector != f.other.url() {
			t.Fatalf("failback disabled: %d checks of the preferred collector, agent on %q", hits, s.Collector)
		}
	})
}

func TestConfigFailbackAfter(t *testing.T) {
	for _, c := range []struct {
		d       time.Duration
		wantErr bool
	}{{0, false}, {-1, false}, {time.Second, false}, {999 * time.Millisecond, true}} {
		_, err := agent.New(agent.Config{URL: "ws://a/api/v1/agent", Service: "s", Instance: "i", FailbackAfter: c.d})
		if (err != nil) != c.wantErr || (err != nil && !strings.Contains(err.Error(), "FailbackAfter")) {
			t.Errorf("FailbackAfter %v: New returned %v", c.d, err)
		}
	}
}
