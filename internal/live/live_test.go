package live

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// newTestLive returns live state on a virtual clock at noon of the test
// epoch's day (opens are counted per UTC day).
func newTestLive(t testing.TB) (*State, *breakertest.Clock) {
	t.Helper()
	clk := breakertest.NewClock(clocktest.Noon())
	return newLive(clk.Now, 15*time.Second, 10*time.Minute, newHub(1024), nil), clk
}

func testHello(service, instance string, cfg protocol.BreakerConfig, labels map[string]string) *protocol.Hello {
	return &protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version, Service: service, Instance: instance,
		StartedAt: 1, Labels: labels, Breakers: []protocol.BreakerConfig{cfg},
	}
}

func window(breaker, state string, at time.Time, c protocol.Counts, h protocol.Headroom, latency []int64) protocol.Window {
	return protocol.Window{
		Breaker: breaker, Start: at.Add(-time.Second).UnixMilli(), Millis: 1000, State: state,
		Counts: c, Headroom: h, Latency: latency,
	}
}

func TestLiveAggregatesAcrossInstances(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	drifted := cfg
	drifted.FailureRateThreshold = 20
	l.Hello(testHello("api", "a", cfg, map[string]string{"region": "eu", "v": "1"}), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "b", cfg, map[string]string{"region": "eu", "v": "2"}), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "c", drifted, map[string]string{"region": "eu"}), 0, nil, clk.Now(), nil)

	hist := func(b1, b100 int64) []int64 {
		h := make([]int64, protocol.NumLatencyBuckets)
		h[0], h[6] = b1, b100 // <=1 ms, 50..100 ms
		return h
	}
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	for s := 1; s <= 10; s++ {
		clk.Advance(time.Second)
		now := clk.Now()
		l.Apply(Key{"api", "a"}, &protocol.Batch{Seq: uint64(s), Windows: []protocol.Window{
			window("db", protocol.StateClosed, now, protocol.Counts{Admitted: 10, Successes: 9, Failures: 1, Errors: 1},
				protocol.Headroom{Calls: 50, Failures: 5, MinimumCalls: 10, FailureRate: 10, FailureRateThreshold: 50}, hist(10, 0)),
		}}, now)
		l.Apply(Key{"api", "b"}, &protocol.Batch{Seq: uint64(s), Windows: []protocol.Window{
			window("db", protocol.StateClosed, now, protocol.Counts{Admitted: 10, Successes: 5, Failures: 5, Timeouts: 5, RejectedOpen: 10},
				protocol.Headroom{Calls: 50, Failures: 20, MinimumCalls: 10, FailureRate: 40, FailureRateThreshold: 50}, hist(0, 10)),
		}}, now)
	}
	d, ok := l.Dependency(k)
	if !ok {
		t.Fatal("dependency unknown")
	}
	// c never reported a window: it is closed (from hello) and live.
	if d.State != protocol.StateClosed || d.ByState[protocol.StateClosed] != 3 || d.Instances != 3 {
		t.Fatalf("state %q by %v instances %d", d.State, d.ByState, d.Instances)
	}
	if d.Recent.Admitted != 200 || d.Recent.Failures != 60 || d.Recent.RejectedOpen != 100 {
		t.Fatalf("recent %+v", d.Recent)
	}
	// 300 calls (200 admitted + 100 rejected) over the 10 s seen so far.
	if d.RequestRate != 30 {
		t.Fatalf("request rate %v, want 30", d.RequestRate)
	}
	// Failure rate from sums: 60 of 200 recorded, not the mean of 10% and 50%.
	if d.FailureRate != 30 {
		t.Fatalf("failure rate %v, want 30", d.FailureRate)
	}
	if d.P50 <= 0 || d.P50 > time.Millisecond || d.P99 <= 50*time.Millisecond || d.P99 > 100*time.Millisecond {
		t.Fatalf("p50 %v p99 %v", d.P50, d.P99)
	}
	if d.Headroom.FailureRate != 40 {
		t.Fatalf("headroom %+v, want instance b's", d.Headroom)
	}
	if len(d.Labels) != 1 || d.Labels["region"] != "eu" {
		t.Fatalf("shared labels %v", d.Labels)
	}
	differs := map[string]bool{}
	for _, ib := range d.PerInstance {
		differs[ib.Instance] = ib.ConfigDiffers
	}
	if differs["a"] || differs["b"] || !differs["c"] {
		t.Fatalf("config drift %v, want only c", differs)
	}

	// A minute later the old reports no longer count.
	clk.Advance(61 * time.Second)
	l.Sweep()
	d, _ = l.Dependency(k)
	if d.Recent.Admitted != 0 || d.P99 != 0 {
		t.Fatalf("recent after a minute %+v p99 %v", d.Recent, d.P99)
	}
}

func TestLiveStaleInstanceNeverKeepsOpen(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db"}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "b", cfg, nil), 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	l.Apply(Key{"api", "a"}, &protocol.Batch{Seq: 1, Transitions: []protocol.Transition{{
		Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(), Cause: protocol.Cause{Kind: protocol.CauseFailureRate},
	}}}, clk.Now())
	d, _ := l.Dependency(k)
	if d.State != protocol.StateOpen || d.OpensToday != 1 {
		t.Fatalf("state %q opens %d, want open 1", d.State, d.OpensToday)
	}
	for _, in := range d.PerInstance {
		if tr := in.LastTrip; (in.Instance == "a") != (tr != nil) || (tr != nil && tr.Cause.Kind != protocol.CauseFailureRate) {
			t.Fatalf("instance %s last trip %+v, want a's failure-rate trip only", in.Instance, tr)
		}
	}
	// b keeps reporting; a goes silent.
	for i := 0; i < 16; i++ {
		clk.Advance(time.Second)
		l.Apply(Key{"api", "b"}, &protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{
			window("db", protocol.StateClosed, clk.Now(), protocol.Counts{}, protocol.Headroom{}, nil),
		}}, clk.Now())
	}
	l.Sweep()
	d, _ = l.Dependency(k)
	if d.State != protocol.StateClosed || d.Stale != 1 || d.ByState[protocol.StateOpen] != 0 {
		t.Fatalf("state %q stale %d by %v: a stale open must not count", d.State, d.Stale, d.ByState)
	}
	clk.Advance(11 * time.Minute)
	l.Sweep()
	if _, ok := l.Dependency(k); ok {
		t.Fatal("dependency still known after every instance is gone")
	}
}

func TestLiveAppliesABatchOnce(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	l.Hello(testHello("api", "a", protocol.BreakerConfig{Name: "db"}, nil), 3, nil, clk.Now(), nil)
	b := &protocol.Batch{Seq: 3, Windows: []protocol.Window{
		window("db", protocol.StateClosed, clk.Now(), protocol.Counts{Admitted: 1, Successes: 1}, protocol.Headroom{}, nil),
	}}
	if l.Apply(Key{"api", "a"}, b, clk.Now()) {
		t.Fatal("applied a batch the store already holds")
	}
	b.Seq = 4
	if !l.Apply(Key{"api", "a"}, b, clk.Now()) || l.Apply(Key{"api", "a"}, b, clk.Now()) {
		t.Fatal("want seq 4 applied exactly once")
	}
	// The same instance restarted (new started_at): seqs start again.
	h := testHello("api", "a", protocol.BreakerConfig{Name: "db"}, nil)
	h.StartedAt = 2
	l.Hello(h, 0, nil, clk.Now(), nil)
	b.Seq = 1
	if !l.Apply(Key{"api", "a"}, b, clk.Now()) {
		t.Fatal("seq 1 of a new run not applied")
	}
	d, _ := l.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if d.Recent.Admitted != 2 {
		t.Fatalf("admitted %d, want 2", d.Recent.Admitted)
	}
}

func TestSubscribeSnapshotThenEvents(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	l.Hello(testHello("api", "a", protocol.BreakerConfig{Name: "db"}, nil), 0, nil, clk.Now(), nil)
	snap, sub := l.subscribe(nil, 0)
	defer l.hub.remove(sub)
	if len(snap) != 1 || snap[0].State != protocol.StateClosed {
		t.Fatalf("snapshot %+v", snap)
	}
	l.Apply(Key{"api", "a"}, &protocol.Batch{Seq: 1, Transitions: []protocol.Transition{{
		Breaker: "db", From: protocol.StateClosed, To: protocol.StateForcedOpen, At: clk.Now().UnixMilli(),
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: "c1", Action: protocol.ActionForceOpen, Actor: "ann", Reason: "maintenance"},
	}}}, clk.Now())
	e := <-sub.ch
	if e.Kind != cbdash.EventTransition || e.Transition.To != protocol.StateForcedOpen {
		t.Fatalf("first event %+v", e)
	}
	select {
	case <-l.kick:
	default:
		t.Fatal("a state change did not wake the publisher")
	}
	l.FlushUrgent()
	e = <-sub.ch
	if e.Kind != cbdash.EventDependency || e.Dependency.State != protocol.StateForcedOpen || e.Dependency.Held == nil || e.Dependency.Held.Actor != "ann" {
		t.Fatalf("second event %+v", e)
	}
}

// subscribeViews hands out the collector's own views: the snapshot's
// are the ones an unchanged dependency's later events carry, and one
// that changed has a new view, never a write to the old one.
func TestSubscribeViewsSharesTheViews(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	for _, name := range []string{"db", "cache"} {
		l.Hello(testHello("api", "a-"+name, protocol.BreakerConfig{Name: name}, nil), 0, nil, clk.Now(), nil)
	}
	snap, sub := l.subscribeViews(nil, 0)
	defer l.hub.remove(sub)
	if len(snap) != 2 {
		t.Fatalf("snapshot of %d views", len(snap))
	}
	views := map[string]*cbdash.Dependency{}
	for _, v := range snap {
		views[v.Breaker] = v
	}
	copies, sub2 := l.subscribe(nil, 0)
	l.hub.remove(sub2)
	for _, c := range copies {
		if v := views[c.Breaker]; v == nil || v.State != c.State {
			t.Errorf("%s: view %p, copy %+v", c.Breaker, v, c)
		}
	}
	l.mu.Lock()
	same := l.viewLocked(l.deps[cbdash.DependencyKey{Service: "api", Breaker: "cache"}])
	l.mu.Unlock()
	if same != views["cache"] {
		t.Error("the snapshot's view is not the collector's")
	}
	db := views["db"]
	l.Apply(Key{"api", "a-db"}, &protocol.Batch{Seq: 1, Transitions: []protocol.Transition{{
		Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(),
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}}}}, clk.Now())
	l.FlushUrgent()
	for e := range sub.ch {
		if e.Kind != cbdash.EventDependency {
			continue
		}
		if e.Dependency == db || e.Dependency.State != protocol.StateOpen {
			t.Fatalf("the change of db came as %p (state %s), the snapshot's view was %p", e.Dependency, e.Dependency.State, db)
		}
		break
	}
	if db.State != protocol.StateClosed {
		t.Errorf("the snapshot's view was written to: %s", db.State)
	}
}

func TestHubDropsASlowSubscriber(t *testing.T) {
	t.Parallel()
	h := newHub(2)
	slow, fast := h.add(nil, 0), h.add(nil, 0)
	drops := 0
	h.onDrop = func() { drops++ }
	for i := 0; i < 3; i++ {
		h.publish(cbdash.Event{Kind: cbdash.EventCommand})
		<-fast.ch
	}
	n := 0
	for range slow.ch { // closed once dropped
		n++
	}
	if n > 2 || drops != 1 {
		t.Fatalf("slow got %d events, drops %d; want at most its buffer (2) and 1", n, drops)
	}
	h.publish(cbdash.Event{Kind: cbdash.EventCommand})
	if _, ok := <-fast.ch; !ok {
		t.Fatal("fast subscriber dropped")
	}
	h.remove(slow) // idempotent after a drop
	h.close()
	if _, ok := <-fast.ch; ok {
		t.Fatal("channel open after close")
	}
}

func TestHubCoalescesViewsOfALaggingSubscriber(t *testing.T) {
	t.Parallel()
	h := newHub(4)
	defer h.close()
	sub := h.add(nil, 0)
	drops := 0
	h.onDrop = func() { drops++ }
	const deps, rounds = 10, 500
	var trans []uint64
	for r := 1; r <= rounds; r++ {
		for d := 0; d < deps; d++ {
			v := &cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "svc", Breaker: fmt.Sprint("b", d)}, Instances: r}
			h.publish(cbdash.Event{Kind: cbdash.EventDependency, Dependency: v})
		}
		if r%200 == 0 { // fewer than the buffer of 4
			trans = append(trans, uint64(r))
			h.publish(cbdash.Event{Kind: cbdash.EventTransition, Transition: &cbdash.TransitionRecord{Transition: protocol.Transition{Generation: uint64(r)}}})
		}
		sub.mu.Lock()
		if n := len(sub.pending); n > 2*(deps+len(trans))+65 {
			sub.mu.Unlock()
			t.Fatalf("round %d: %d events queued for %d dependencies and %d transitions", r, n, deps, len(trans))
		}
		sub.mu.Unlock()
	}
	if drops != 0 {
		t.Fatal("a subscriber lagging on views only was dropped")
	}
	// The consumer now catches up: the latest view of every dependency,
	// every transition in order, and views only for the pump's one in hand
	// beyond one per dependency.
	latest := map[string]int{}
	views := 0
	var got []uint64
	for len(latest) < deps || latest["b9"] != rounds || len(got) < len(trans) {
		e := <-sub.ch
		switch e.Kind {
		case cbdash.EventDependency:
			views++
			latest[e.Dependency.Breaker] = e.Dependency.Instances
		case cbdash.EventTransition:
			got = append(got, e.Transition.Generation)
		}
	}
	for b, n := range latest {
		if n != rounds {
			t.Fatalf("last view of %s from round %d, want %d", b, n, rounds)
		}
	}
	if !slices.Equal(got, trans) {
		t.Fatalf("transitions %v, want %v", got, trans)
	}
	if views > deps+1 {
		t.Fatalf("%d views delivered after the lag, want at most %d", views, deps+1)
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	h := make([]int64, protocol.NumLatencyBuckets)
	tests := []struct {
		name string
		fill func()
		q    float64
		want time.Duration
	}{
		{"empty", func() {}, 0.5, 0},
		{"middle of the 5..10 ms bucket", func() { h[3] = 10 }, 0.5, 7500 * time.Microsecond},
		{"overflow reports the last bound", func() { h[3] = 0; h[len(h)-1] = 1 }, 0.99, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fill()
			if got := quantile(tt.q, h); got != tt.want {
				t.Fatalf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
