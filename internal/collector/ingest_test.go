package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

func storedTransitions(t *testing.T, h *harness, instance string) []cbdash.TransitionRecord {
	t.Helper()
	ts, err := h.store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "api", Instance: instance, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestStreamIsStoredAckedAndLive(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	_, events, cancel := h.col.Subscribe()
	defer cancel()
	a := dialRaw(t, h, h.token)
	if w := a.hello("a1", 1); w.LastSeq != 0 || w.Protocol != protocol.Version {
		t.Fatalf("welcome %+v", w)
	}
	a.send(h.batch(1, 100, 60, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	var ack protocol.Ack
	a.expect(protocol.TypeAck, &ack)
	if ack.Seq != 1 {
		t.Fatalf("ack %d, want 1", ack.Seq)
	}
	if ts := storedTransitions(t, h, "a1"); len(ts) != 1 || ts[0].To != protocol.StateOpen {
		t.Fatalf("stored transitions %+v", ts)
	}
	for e := range events {
		if e.Kind == cbdash.EventTransition {
			if e.Transition.Instance != "a1" || e.Transition.To != protocol.StateOpen {
				t.Fatalf("transition event %+v", e.Transition)
			}
			break
		}
	}
	eventually.True(t, "live counts", func() bool {
		d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		return d.Recent.Admitted > 0
	})
	d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if d.State != protocol.StateOpen || d.Recent.Admitted != 100 || d.FailureRate != 60 || d.OpensToday != 1 {
		t.Fatalf("live state %q admitted %d failure rate %v opens %d", d.State, d.Recent.Admitted, d.FailureRate, d.OpensToday)
	}
}

func TestRefusedBatchKeepsTheConnectionAndEarlierData(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.send(h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	a.expect(protocol.TypeAck, nil)

	negative := h.batch(2, 10, 0)
	negative.Windows[0].Counts.Successes = -1
	undeclared := h.batch(3, 10, 0)
	undeclared.Windows[0].Breaker = "queue"
	future := h.batch(4, 10, 0)
	future.Windows[0].Start = h.now().Add(time.Hour).UnixMilli() // ahead of its own sent_at
	tests := []struct {
		name   string
		send   any
		seq    uint64
		reason string
	}{
		{"negative count", negative, 2, "negative"},
		{"breaker not in hello", undeclared, 3, "not declared"},
		{"timestamp in the future", future, 4, "future"},
		{"wrong JSON type", []byte(`{"type":"batch","seq":5,"windows":"none"}`), 5, "windows"},
		{"not JSON", []byte(`{{{`), 0, "malformed"},
		{"unknown type", []byte(`{"type":"gossip"}`), 0, "unknown message type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if raw, ok := tt.send.([]byte); ok {
				a.sendRaw(raw)
			} else {
				a.send(tt.send)
			}
			var e protocol.Error
			a.expect(protocol.TypeError, &e)
			if e.Seq != tt.seq || e.Fatal || !strings.Contains(e.Reason, tt.reason) {
				t.Fatalf("error %+v, want seq %d, not fatal, reason with %q", e, tt.seq, tt.reason)
			}
		})
	}
	// The connection is still usable and batch 1 is still stored.
	a.send(h.batch(6, 10, 0, h.trans(protocol.StateOpen, protocol.StateHalfOpen, 1)))
	var ack protocol.Ack
	a.expect(protocol.TypeAck, &ack)
	if ack.Seq != 6 {
		t.Fatalf("ack %d, want 6", ack.Seq)
	}
	if ts := storedTransitions(t, h, "a1"); len(ts) != 2 {
		t.Fatalf("%d transitions stored, want 2", len(ts))
	}
}

func TestHandshakeFailuresAreFatal(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	limited, err := h.store.CreateAgentToken(context.Background(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	badHello := rawHello("a1", 1)
	badHello.Protocol = 2
	tests := []struct {
		name   string
		token  string
		first  any
		reason string
	}{
		{"bad token", "nope", rawHello("a1", 1), "token"},
		{"token of another service", limited, rawHello("a1", 1), "limited to service"},
		{"unsupported protocol", h.token, badHello, "protocol 2"},
		{"batch before hello", h.token, h.batch(1, 1, 0), "first message must be a hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := dialRaw(t, h, tt.token)
			a.send(tt.first)
			var e protocol.Error
			a.expect(protocol.TypeError, &e)
			if !e.Fatal || !strings.Contains(e.Reason, tt.reason) {
				t.Fatalf("error %+v, want fatal with %q", e, tt.reason)
			}
			if _, _, err := a.next(); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("after a fatal error: %v, want close 1008", err)
			}
		})
	}
}

func TestResentBatchesAreAckedButCountedOnce(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 7)
	for seq := uint64(1); seq <= 3; seq++ {
		a.send(h.batch(seq, 10, 1))
		a.expect(protocol.TypeAck, nil)
	}
	a.conn.CloseNow()
	b := dialRaw(t, h, h.token)
	if w := b.hello("a1", 7); w.LastSeq != 3 {
		t.Fatalf("welcome last_seq %d, want 3", w.LastSeq)
	}
	b.send(h.batch(3, 10, 1)) // an agent that had not seen the ack resends
	var ack protocol.Ack
	b.expect(protocol.TypeAck, &ack)
	if ack.Seq != 3 {
		t.Fatalf("ack %d", ack.Seq)
	}
	// Live state is updated off the connection's goroutine: wait for it.
	eventually.True(t, "live counts", func() bool {
		d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		return d.Recent.Admitted >= 30
	})
	if d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"}); d.Recent.Admitted != 30 {
		t.Fatalf("live admitted %d, want 30", d.Recent.Admitted)
	}
	pts, err := h.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h.now().Add(-time.Minute), To: h.now().Add(time.Minute), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
	}
	if admitted != 30 {
		t.Fatalf("stored admitted %d, want 30", admitted)
	}
}

func TestSlowSubscriberNeverBlocksIngest(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", func(c *Config) { c.SubscriberBuffer = 4 })
	_, stuck, cancel := h.col.Subscribe() // never read
	defer cancel()
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	states := []string{protocol.StateClosed, protocol.StateOpen}
	for seq := uint64(1); seq <= 50; seq++ {
		a.send(h.batch(seq, 1, 0, h.trans(states[seq%2], states[(seq+1)%2], seq)))
		var ack protocol.Ack
		a.expect(protocol.TypeAck, &ack)
		if ack.Seq != seq {
			t.Fatalf("ack %d, want %d", ack.Seq, seq)
		}
	}
	n := 0
	for range stuck {
		n++
	}
	if n > 4 {
		t.Fatalf("the stuck subscriber got %d events before being dropped, want at most its buffer (4)", n)
	}
}

func TestNewerConnectionReplacesOlder(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	old := dialRaw(t, h, h.token)
	old.hello("a1", 1)
	fresh := dialRaw(t, h, h.token)
	fresh.hello("a1", 1)
	var e protocol.Error
	old.expect(protocol.TypeError, &e)
	if !e.Fatal || !e.Retry || !strings.Contains(e.Reason, "replaced by a newer connection") {
		t.Fatalf("error %+v, want a fatal retry error naming the replacement", e)
	}
	if _, _, err := old.next(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("the older connection: %v, want close 1001", err)
	}
	fresh.send(h.batch(1, 1, 0))
	fresh.expect(protocol.TypeAck, nil)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no store", Config{}, "Store"},
		{"gone before stale", Config{Store: h.store, StaleAfter: time.Minute, GoneAfter: time.Second}, "GoneAfter"},
		{"negative buffer", Config{Store: h.store, SubscriberBuffer: -1}, "SubscriberBuffer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err %v, want one naming %s", err, tt.field)
			}
		})
	}
	if _, err := New(Config{Store: h.store}); err != nil {
		t.Fatalf("zero config with a store: %v", err)
	}
}
