package collector

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// aheadClock is the test's one clock as an agent ahead of the collector
// by a fixed skew sees it.
type aheadClock struct {
	*clocktest.Running
	by time.Duration
}

func (c aheadClock) Now() time.Time { return c.Running.Now().Add(c.by) }

// TestAHeldBreakerShowsTheHoldsOneEnd: an agent 900 ms ahead (within the
// skew the collector leaves as it is) computes its forced state's expiry
// on its own clock; the dependency is still shown held until the hold's
// expiry, the same instant as the hold record's, not a second later.
func TestAHeldBreakerShowsTheHoldsOneEnd(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	ahead := aheadClock{clk, 900 * time.Millisecond}
	ag, err := agent.New(agent.Config{URL: h.wsURL(), Token: h.token, Service: "checkout", Instance: "checkout-1", Clock: ahead,
		ReportInterval: 50 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	br, err := breaker.New("payments", breaker.Config{MinimumCalls: 1000, FailureRateThreshold: 50, OpenDuration: time.Minute, Clock: ahead})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Register(br); err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ag.Close(ctx)
	})
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.True(t, "the instance", func() bool {
		d, err := h.col.Dependency(k)
		return err == nil && d.Instances == 1
	})

	hold, err := h.col.CreateHold(context.Background(), cbdash.Actor{Name: "ann"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill", Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "held open in live state", func() bool {
		d, err := h.col.Dependency(k)
		return err == nil && d.Held != nil && d.Held.HoldID == hold.ID
	})
	if own := br.Snapshot().ForcedUntil; !own.After(hold.Until.Add(800 * time.Millisecond)) {
		t.Fatalf("the agent's own expiry %v is not about 900 ms after the hold's %v: the test does not show the skew", own, hold.Until)
	}
	d, _ := h.col.Dependency(k)
	if !d.Held.Until.Equal(hold.Until) || !d.PerInstance[0].Held.Until.Equal(hold.Until) {
		t.Errorf("held until %v (instance: %v), want the hold's expiry %v", d.Held.Until, d.PerInstance[0].Held.Until, hold.Until)
	}
	if !hold.End().Equal(hold.Until) {
		t.Errorf("a live hold's end %v, want its expiry %v", hold.End(), hold.Until)
	}
}
