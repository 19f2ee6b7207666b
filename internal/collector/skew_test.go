package collector

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// skewedBatch is batch seq of instance clock now+skew: one window of "db"
// that ended at the agent's now, and the given transitions (at the
// agent's now).
func skewedBatch(now time.Time, skew time.Duration, seq uint64, admitted int64, ts ...protocol.Transition) protocol.Batch {
	at := now.Add(skew).UnixMilli()
	state := protocol.StateClosed
	for i := range ts {
		ts[i].At = at
		state = ts[i].To
	}
	return protocol.Batch{
		Type: protocol.TypeBatch, Seq: seq, SentAt: at, Transitions: ts,
		Windows: []protocol.Window{{Breaker: "db", Start: at - 1000, Millis: 1000, State: state,
			Counts: protocol.Counts{Admitted: admitted, Successes: admitted}}},
	}
}

func perInstance(t *testing.T, h *harness) map[string]cbdash.InstanceBreaker {
	t.Helper()
	d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]cbdash.InstanceBreaker{}
	for _, in := range d.PerInstance {
		m[in.Instance] = *in
	}
	return m
}

// TestClockSkewIsMeasuredAndNeverRefused: an agent ten minutes ahead is
// stored at the collector's time, an agent two minutes behind stays in the
// live aggregate, both show their skew, and the last trip of each is
// stamped with its receipt time.
func TestClockSkewIsMeasuredAndNeverRefused(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	started := clocktest.Epoch().Add(-time.Hour).UnixMilli()
	ahead, behind := dialRaw(t, h, h.token), dialRaw(t, h, h.token)
	ahead.hello("ahead", started)
	behind.hello("behind", started)

	trip := h.trans(protocol.StateClosed, protocol.StateOpen, 1)
	for seq := uint64(1); seq <= 3; seq++ {
		b := skewedBatch(clk.Now(), 10*time.Minute, seq, 10)
		if seq == 3 {
			b = skewedBatch(clk.Now(), 10*time.Minute, seq, 10, trip)
		}
		ahead.send(b)
		var ack protocol.Ack
		ahead.expect(protocol.TypeAck, &ack)
		if ack.Seq != seq {
			t.Fatalf("ahead: ack %d, want %d", ack.Seq, seq)
		}
	}
	aheadTripRecv := clk.Now()
	for seq := uint64(1); seq <= 3; seq++ {
		b := skewedBatch(clk.Now(), -2*time.Minute, seq, 100)
		if seq == 3 {
			b = skewedBatch(clk.Now(), -2*time.Minute, seq, 100, trip)
		}
		behind.send(b)
		behind.expect(protocol.TypeAck, nil)
	}
	eventually.True(t, "both instances applied", func() bool {
		m := perInstance(t, h)
		return m["ahead"].LastTrip != nil && m["behind"].LastTrip != nil
	})
	m := perInstance(t, h)
	if s := m["ahead"].ClockSkewMillis; s < 9*60_000 || s > 10*60_000 {
		t.Errorf("ahead: clock_skew_ms %d, want about 600000", s)
	}
	// The skew is sent_at minus the receipt time, so the delivery delay
	// (a millisecond or more on a loaded machine) makes it a little more
	// negative than the agent's two minutes.
	if s := m["behind"].ClockSkewMillis; s > -110_000 || s < -125_000 {
		t.Errorf("behind: clock_skew_ms %d, want about -120000 (minus the delivery delay)", s)
	}
	if !m["behind"].LastTripReceivedAt.After(m["ahead"].LastTripReceivedAt) || m["ahead"].LastTripReceivedAt.Before(aheadTripRecv.Add(-time.Minute)) {
		t.Errorf("last trips received at %v (ahead) and %v (behind): want the behind one later, by the collector's clock",
			m["ahead"].LastTripReceivedAt, m["behind"].LastTripReceivedAt)
	}
	// The agent behind still counts in the last minute.
	d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if d.Recent.Admitted != 330 {
		t.Errorf("live admitted %d, want 330 (30 ahead + 300 behind)", d.Recent.Admitted)
	}
	// The agent ahead is stored at the collector's time, not ten minutes on.
	pts, err := h.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          clk.Now().Add(-time.Minute), To: clk.Now().Add(time.Minute), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
	}
	if admitted != 30 {
		t.Errorf("stored admitted around now %d, want the 30 of the agent ahead", admitted)
	}
	ts := storedTransitions(t, h, "ahead")
	if len(ts) != 1 || ts[0].At > clk.Now().UnixMilli() {
		t.Errorf("ahead's transition stored at %v, want at the collector's time (before %v)", ts, clk.Now())
	}
}

// TestHTTPIngestAheadIsAccepted: the same over HTTP ingest.
func TestHTTPIngestAheadIsAccepted(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	req := protocol.IngestRequest{Hello: rawHello("h1", clk.Now().Add(-time.Hour).UnixMilli()), Batch: skewedBatch(clk.Now(), 30*time.Minute, 1, 5)}
	status, body := call(t, "POST", h.srv.URL+"/api/v1/ingest", h.token, req)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if s := perInstance(t, h)["h1"].ClockSkewMillis; s < 29*60_000 {
		t.Fatalf("clock_skew_ms %d, want about 1800000", s)
	}
}

// TestShadowTransitionsOfASkewedAgentAreMovedBack: the shadow transitions
// of an agent ten minutes ahead are stored at the collector's time, like
// its live ones, and leave the live state alone.
func TestShadowTransitionsOfASkewedAgentAreMovedBack(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	ahead := dialRaw(t, h, h.token)
	ahead.hello("ahead", clocktest.Epoch().Add(-time.Hour).UnixMilli())
	for seq := uint64(1); seq <= 3; seq++ {
		b := skewedBatch(clk.Now(), 10*time.Minute, seq, 10)
		if seq == 3 {
			tr := h.trans(protocol.StateClosed, protocol.StateOpen, 1)
			tr.Shadow, tr.At = "tight", b.SentAt
			b.ShadowTransitions = []protocol.Transition{tr}
		}
		ahead.send(b)
		ahead.expect(protocol.TypeAck, nil)
	}
	trs, err := h.store.ShadowTransitions(context.Background(), cbdash.TransitionQuery{Service: "api", Breaker: "db"})
	if err != nil || len(trs) != 1 || trs[0].Shadow != "tight" {
		t.Fatalf("shadow transitions %+v, %v", trs, err)
	}
	if off := time.UnixMilli(trs[0].At).Sub(clk.Now()); off > time.Minute {
		t.Fatalf("the shadow transition is stored %v ahead of the collector's clock: not moved back", off)
	}
	if st := perInstance(t, h)["ahead"].State; st != protocol.StateClosed {
		t.Fatalf("live state %q after a shadow trip, want closed", st)
	}
}
