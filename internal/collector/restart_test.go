package collector

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestCollectorRestartMidStreamLosesNothingAndDuplicatesNothing stops the
// collector (server and store) while an agent streams batches without
// waiting for acks, reopens the same database, and resends from the
// welcome's last_seq as an agent does: every acked batch must be stored,
// and every batch exactly once.
func TestCollectorRestartMidStreamLosesNothingAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	const total = 300
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 42)

	var mu sync.Mutex
	var acked uint64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			typ, data, err := a.next()
			if err != nil {
				return
			}
			if typ == protocol.TypeAck {
				var ack protocol.Ack
				_ = json.Unmarshal(data, &ack)
				mu.Lock()
				acked = max(acked, ack.Seq)
				mu.Unlock()
			}
		}
	}()
	states := []string{protocol.StateClosed, protocol.StateOpen}
	mk := func(seq uint64) protocol.Batch {
		return h.batch(seq, 10, 1, h.trans(states[seq%2], states[(seq+1)%2], seq))
	}
	sent := uint64(0)
	for seq := uint64(1); seq <= total; seq++ {
		if seq == total/2 {
			go h.stop() // kill the collector mid-stream
		}
		data, _ := json.Marshal(mk(seq))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := a.conn.Write(ctx, 1, data)
		cancel()
		if err != nil {
			break
		}
		sent = seq
	}
	<-readerDone
	h.stop()
	mu.Lock()
	lastAcked := acked
	mu.Unlock()
	t.Logf("sent %d, acked %d before the restart", sent, lastAcked)

	h2 := startHarness(t, h.path, h.restartOpts)
	b := dialRaw(t, h2, h.token)
	w := b.hello("a1", 42)
	if w.LastSeq < lastAcked {
		t.Fatalf("welcome last_seq %d < acked %d: acked data lost", w.LastSeq, lastAcked)
	}
	// Resend what the collector does not have (and, to be hostile, the
	// last batch it does have, which must be recognised as a duplicate).
	for seq := max(w.LastSeq, 1); seq <= total; seq++ {
		b.send(mk(seq))
	}
	for {
		var ack protocol.Ack
		b.expect(protocol.TypeAck, &ack)
		if ack.Seq == total {
			break
		}
	}
	ts := storedTransitions(t, h2, "a1")
	if len(ts) != total {
		t.Fatalf("%d transitions stored, want %d", len(ts), total)
	}
	gens := map[uint64]int{}
	for _, tr := range ts {
		gens[tr.Generation]++
	}
	for g := uint64(1); g <= total; g++ {
		if gens[g] != 1 {
			t.Fatalf("transition %d stored %d times", g, gens[g])
		}
	}
	pts, err := h2.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h2.now().Add(-time.Hour), To: h2.now().Add(time.Minute), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted, failures int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
		failures += p.Counts.Failures
	}
	if admitted != 10*total || failures != total {
		t.Fatalf("stored admitted %d failures %d, want %d and %d", admitted, failures, 10*total, total)
	}
}

// TestLiveStateIsRestoredFromTheStore: after a restart the collector knows
// the instances and their last state before any agent reconnects, and
// marks them stale once they have been silent for StaleAfter.
func TestLiveStateIsRestoredFromTheStore(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.send(h.batch(1, 10, 10, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	a.expect(protocol.TypeAck, nil)
	a.conn.CloseNow()
	h.stop()

	// The restarted collector runs on a virtual clock from where the first
	// one's clock stood: only the test moves it past StaleAfter.
	clk := breakertest.NewClock(h.now())
	h2 := startHarness(t, h.path, func(c *Config) { c.Clock = clk })
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	d, err := h2.col.Dependency(k)
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if d.Instances != 1 || d.PerInstance[0].State != protocol.StateOpen || d.OpensToday != 1 {
		t.Fatalf("restored %d instances, state %q, opens %d", d.Instances, d.PerInstance[0].State, d.OpensToday)
	}
	clk.Advance(20 * time.Second)
	h2.col.live.Sweep()
	if d, _ = h2.col.Dependency(k); d.Stale != 1 || d.State != "" {
		t.Fatalf("silent instance: stale %d, state %q; want stale and no state", d.Stale, d.State)
	}
}
