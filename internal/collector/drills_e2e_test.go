package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// End to end on the real clock: real agents whose forced-open breakers'
// fallbacks begin to fail for half the calls, during a drill whose stop
// condition is a fallback failure rate over 5 %: every covered breaker is
// back to closed within 2 s of the first failure, and the drill report
// says STOPPED with the breach.
func TestADrillStopsItselfEndToEndWithin2sOfItsFallbacksFailing(t *testing.T) {
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	ctx := context.Background()
	var fleet []*holdMember
	for _, inst := range []string{"pricing-1", "pricing-2", "pricing-3"} {
		fleet = append(fleet, startHoldMember(t, h, clk, "shop", inst, nil, "pricing"))
	}
	eventually.True(t, "three instances", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: "pricing"})
		return err == nil && d.Instances == 3
	})
	hold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "*", Breaker: "pricing"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill the pricing fallback",
		StopIf: []cbdash.StopCondition{{Metric: cbdash.StopFallbackFailureRate, Above: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fleet {
		forcedWithin(t, m, "pricing", breaker.ForcedOpen, time.Now())
	}
	pace := time.NewTicker(10 * time.Millisecond)
	defer pace.Stop()
	start := time.Now()
	bound := time.After(time.Minute)
	for held := true; held; {
		held = false
		for _, m := range fleet {
			m.drive("pricing", 5, 5)
			held = held || m.state("pricing") == breaker.ForcedOpen
		}
		select {
		case <-pace.C:
		case <-bound:
			t.Fatal("still forced open a minute after the fallbacks began to fail")
		}
	}
	took := time.Since(start)
	t.Logf("every covered breaker released %v after its fallbacks began to fail", took)
	if took > 2*time.Second {
		t.Errorf("released %v after the breach, want within 2 s", took)
	}
	r, err := h.col.HoldReport(ctx, hold.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != cbdash.DrillStopped || r.Hold.Breach == nil || !strings.HasPrefix(r.Hold.ReleaseReason, "stop condition: fallback failure rate ") {
		t.Fatalf("report: result %q, breach %+v, reason %q; want stopped by the fallback failure rate", r.Result, r.Hold.Breach, r.Hold.ReleaseReason)
	}
	if md := string(HoldReportMarkdown(r)); !strings.Contains(md, "STOPPED") {
		t.Errorf("the Markdown report does not say STOPPED:\n%s", md)
	}
}
