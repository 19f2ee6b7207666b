package live

import (
	"bytes"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/live/linetest"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// nextView is the next dependency event of sub.
func nextView(t *testing.T, sub *subscriber) *cbdash.Dependency {
	t.Helper()
	timeout := time.After(10 * time.Second) // a guard: the view is queued already
	for {
		select {
		case e := <-sub.ch:
			if e.Kind == cbdash.EventDependency {
				return e.Dependency
			}
		case <-timeout:
			t.Fatal("no dependency event")
		}
	}
}

// TestAPublishedViewsLinesNeverChange: the lines of a view a subscriber
// (or a caller of dependency) holds keep their values while the
// instances move on; the next view has new lines for the instances that
// reported, and the very same line for one that sent nothing.
func TestAPublishedViewsLinesNeverChange(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	for _, inst := range []string{"a", "b", "c"} {
		l.Hello(testHello("api", inst, cfg, map[string]string{"region": "eu", "pod": inst}), 0, nil, clk.Now(), nil)
	}
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	hist := func(n int64) []int64 {
		h := make([]int64, protocol.NumLatencyBuckets)
		h[2] = n
		return h
	}
	report := func(inst string, seq uint64, state string, admitted, failures int64, trs ...protocol.Transition) {
		t.Helper()
		w := window("db", state, clk.Now(), protocol.Counts{Admitted: admitted, Successes: admitted - failures, Failures: failures},
			protocol.Headroom{Calls: admitted, Failures: failures, MinimumCalls: 10, FailureRate: 100 * float64(failures) / float64(admitted), FailureRateThreshold: 50},
			hist(admitted))
		if !l.Apply(Key{"api", inst}, &protocol.Batch{Seq: seq, Windows: []protocol.Window{w}, Transitions: trs}, clk.Now()) {
			t.Fatalf("batch %d of %s not applied", seq, inst)
		}
	}

	_, sub := l.subscribe(map[string]bool{cbdash.EventDependency: true}, 0)
	defer l.hub.remove(sub)
	clk.Advance(time.Second)
	for _, inst := range []string{"a", "b", "c"} {
		report(inst, 1, protocol.StateClosed, 20, 1)
	}
	l.Flush()
	first := nextView(t, sub)
	called, ok := l.Dependency(k)
	if !ok || len(first.PerInstance) != 3 || len(called.PerInstance) != 3 {
		t.Fatalf("first view: known %v, %d and %d lines, want 3", ok, len(first.PerInstance), len(called.PerInstance))
	}
	wantFirst, wantCalled := linetest.DeepCopies(first.PerInstance), linetest.DeepCopies(called.PerInstance)
	cFirst := linetest.Of(t, first, "c")

	// a trips, b is forced open by an operator, both report new windows;
	// c sends nothing.
	clk.Advance(time.Second)
	report("a", 2, protocol.StateOpen, 30, 25, protocol.Transition{
		Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().UnixMilli(),
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 83, Threshold: 50},
	})
	report("b", 2, protocol.StateForcedOpen, 40, 0, protocol.Transition{
		Breaker: "db", From: protocol.StateClosed, To: protocol.StateForcedOpen, At: clk.Now().UnixMilli(),
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: "c1", Action: protocol.ActionForceOpen, Actor: "ann", Reason: "maintenance"},
	})
	l.Flush()
	second := nextView(t, sub)

	linetest.Unchanged(t, "the subscriber's first view", first.PerInstance, wantFirst)
	linetest.Unchanged(t, "the first view from dependency()", called.PerInstance, wantCalled)
	if a := linetest.Of(t, second, "a"); a.State != protocol.StateOpen || a.LastTrip == nil || a.Last.Counts.Failures != 25 || a.OpenSince.IsZero() {
		t.Errorf("a in the second view: state %q, last trip %v, %d failures, open since %v; want open, tripped, 25, set",
			a.State, a.LastTrip, a.Last.Counts.Failures, a.OpenSince)
	}
	if b := linetest.Of(t, second, "b"); b.State != protocol.StateForcedOpen || b.Held == nil || b.Held.Actor != "ann" || b.Last.Counts.Admitted != 40 {
		t.Errorf("b in the second view: state %q, held %+v, %d admitted; want forced open by ann, 40", b.State, b.Held, b.Last.Counts.Admitted)
	}
	if second.State != protocol.StateOpen || first.State != protocol.StateClosed {
		t.Errorf("states: first %q, second %q; want closed then open", first.State, second.State)
	}
	if c := linetest.Of(t, second, "c"); c != cFirst {
		t.Errorf("c sent nothing, yet the second view has a new line for it: %p, first %p", c, cFirst)
	}
	for _, inst := range []string{"a", "b"} {
		if linetest.Of(t, second, inst) == linetest.Of(t, first, inst) {
			t.Errorf("%s reported, yet the second view has the first view's line for it", inst)
		}
	}
	// A copy of a view has a slice of its own: reordering it leaves the
	// view as it was.
	slices.Reverse(called.PerInstance)
	if again, _ := l.Dependency(k); again.PerInstance[0].Instance != "a" {
		t.Errorf("reordering a copy reordered the view: first line %s", again.PerInstance[0].Instance)
	}
}

// TestALinesConfigAndWindowStayAsPublished: a line points at its
// instance's configuration and last window rather than copying them; a
// later hello with another configuration and a later report leave a
// published line with the values it had.
func TestALinesConfigAndWindowStayAsPublished(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	report := func(seq uint64, admitted int64) {
		t.Helper()
		w := window("db", protocol.StateClosed, clk.Now(), protocol.Counts{Admitted: admitted, Successes: admitted},
			protocol.Headroom{Calls: admitted, MinimumCalls: 10, FailureRateThreshold: 50}, []int64{admitted})
		if !l.Apply(Key{"api", "a"}, &protocol.Batch{Seq: seq, Windows: []protocol.Window{w}}, clk.Now()) {
			t.Fatalf("batch %d not applied", seq)
		}
	}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	clk.Advance(time.Second)
	report(1, 20)
	first, _ := l.Dependency(k)
	line := linetest.Of(t, &first, "a")
	want := linetest.DeepCopy(line)
	if line.Config.FailureRateThreshold != 50 || line.Last.Counts.Admitted != 20 {
		t.Fatalf("first line: threshold %v, %d admitted; want 50, 20", line.Config.FailureRateThreshold, line.Last.Counts.Admitted)
	}

	changed := cfg
	changed.FailureRateThreshold = 20
	l.Hello(testHello("api", "a", changed, nil), 0, nil, clk.Now(), nil)
	clk.Advance(time.Second)
	report(2, 40)
	second, _ := l.Dependency(k)

	linetest.Unchanged(t, "the first view", first.PerInstance, []cbdash.InstanceBreaker{want})
	if now := linetest.Of(t, &second, "a"); now.Config.FailureRateThreshold != 20 || now.Last.Counts.Admitted != 40 || now.Last.Latency[0] != 40 {
		t.Errorf("second line: threshold %v, %d admitted, latency %v; want 20, 40, [40]", now.Config.FailureRateThreshold, now.Last.Counts.Admitted, now.Last.Latency)
	}
}

// TestConfigDriftComparesValues: configurations are told apart by value,
// whichever hello (or stored line) each came from: equal ones never
// differ, and a line with no configuration or window yet reads as the
// zero value in JSON, as when lines held them by value.
func TestConfigDriftComparesValues(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	drifted := cfg
	drifted.FailureRateThreshold = 20
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	differs := func(what string, want map[string]bool) *cbdash.Dependency {
		t.Helper()
		d, _ := l.Dependency(k)
		got := map[string]bool{}
		for _, ib := range d.PerInstance {
			got[ib.Instance] = ib.ConfigDiffers
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: config_differs %v, want %v", what, got, want)
		}
		return &d
	}
	l.Hello(testHello("api", "a", cfg, nil), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "b", cfg, nil), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "c", drifted, nil), 0, nil, clk.Now(), nil)
	stored := cfg // a restored instance's, from the store
	l.Restore([]cbdash.InstanceBreaker{{Service: "api", Instance: "d", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now(), Config: &stored}})
	d := differs("three equal from three sources, one drifted", map[string]bool{"a": false, "b": false, "c": true, "d": false})
	// a and b share their hellos' equal list (sharedLists); d's is the
	// store's, copied: equal, at another address.
	if a, d := linetest.Of(t, d, "a"), linetest.Of(t, d, "d"); a.Config == d.Config {
		t.Fatalf("a and d share a configuration pointer: the test would not tell values from pointers")
	}

	l.Hello(testHello("api", "b", cfg, nil), 0, nil, clk.Now(), nil)
	differs("b says hello again with the same configuration", map[string]bool{"a": false, "b": false, "c": true, "d": false})
	l.Hello(testHello("api", "c", cfg, nil), 0, nil, clk.Now(), nil)
	differs("c comes back to the others' configuration", map[string]bool{"a": false, "b": false, "c": false, "d": false})

	// d has no window yet, and a restored line without a configuration
	// has the zero one (which differs): both are JSON objects, never null.
	l.Restore([]cbdash.InstanceBreaker{{Service: "api", Instance: "e", Breaker: "db", State: protocol.StateClosed, LastSeen: clk.Now()}})
	d = differs("e restored without a configuration", map[string]bool{"a": false, "b": false, "c": false, "d": false, "e": true})
	zeroWindow := mustJSON(t, protocol.Window{})
	for inst, config := range map[string][]byte{"d": mustJSON(t, cfg), "e": mustJSON(t, protocol.BreakerConfig{})} {
		got := mustJSON(t, linetest.Of(t, d, inst))
		if !bytes.Contains(got, []byte(`"config":`+string(config)+`,`)) || !bytes.Contains(got, []byte(`"last":`+string(zeroWindow)+`,`)) {
			t.Errorf("%s's line %s: want config %s and last %s", inst, got, config, zeroWindow)
		}
	}
}
