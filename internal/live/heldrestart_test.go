package live

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live/linetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestAForcedWindowWithoutItsTransitionShowsTheGoverningHold: after a
// collector restart an instance held open reports forced_open windows but
// no transition; its line names the stored hold that governs it (who,
// why, until when) through Config.HoldFor, and a forced state no hold
// explains stays a bare hold with the agent's expiry.
func TestAForcedWindowWithoutItsTransitionShowsTheGoverningHold(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	until := clk.Now().Add(10 * time.Minute).UTC()
	var asked []cbdash.InstanceRef
	l.holdFor = func(inst cbdash.InstanceRef, breaker, action string) (cbdash.Hold, bool) {
		asked = append(asked, inst)
		if inst.Labels["zone"] != "a" || breaker != "db" || action != protocol.ActionForceOpen {
			return cbdash.Hold{}, false
		}
		return cbdash.Hold{HoldID: "h7", Action: action, Actor: "ann", Reason: "drill the db fallback", Until: until}, true
	}
	cfg := protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10}
	l.Hello(testHello("api", "held", cfg, map[string]string{"zone": "a"}), 0, nil, clk.Now(), nil)
	l.Hello(testHello("api", "local", cfg, map[string]string{"zone": "b"}), 0, nil, clk.Now(), nil)
	clk.Advance(time.Second)
	for i, inst := range []string{"held", "local"} {
		w := window("db", protocol.StateForcedOpen, clk.Now(), protocol.Counts{RejectedForced: 5}, protocol.Headroom{}, nil)
		w.ForcedUntil = clk.Now().Add(time.Duration(i+1) * time.Minute).UnixMilli()
		if !l.Apply(Key{"api", inst}, &protocol.Batch{Seq: 1, Windows: []protocol.Window{w}}, clk.Now()) {
			t.Fatalf("batch of %s not applied", inst)
		}
	}
	d, ok := l.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if !ok {
		t.Fatal("no dependency api/db")
	}
	held, local := linetest.Of(t, &d, "held"), linetest.Of(t, &d, "local")
	if h := held.Held; h == nil || h.HoldID != "h7" || h.Actor != "ann" || h.Reason != "drill the db fallback" || !h.Until.Equal(until) {
		t.Errorf("held's line: held %+v; want hold h7 by ann, its reason, until %v", h, until)
	}
	if h := local.Held; h == nil || h.HoldID != "" || h.Actor != "" || !h.Until.Equal(clk.Now().Add(2*time.Minute).Truncate(time.Millisecond)) {
		t.Errorf("local's line: held %+v; want a bare hold until the agent's expiry", h)
	}
	if len(asked) != 2 || asked[0].Service != "api" || asked[0].Instance != "held" {
		t.Errorf("HoldFor asked %+v; want once per instance, with its service, id and labels", asked)
	}
	// The next window keeps the hold without asking again.
	clk.Advance(time.Second)
	w := window("db", protocol.StateForcedOpen, clk.Now(), protocol.Counts{RejectedForced: 5}, protocol.Headroom{}, nil)
	l.Apply(Key{"api", "held"}, &protocol.Batch{Seq: 2, Windows: []protocol.Window{w}}, clk.Now())
	if len(asked) != 2 {
		t.Errorf("HoldFor asked again for a breaker whose hold is known: %+v", asked)
	}
}
