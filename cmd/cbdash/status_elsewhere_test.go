package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestStatusSaysAnInstanceIsOnAnotherCollector: two collectors over one
// PostgreSQL schema, checkout-1 reporting to A, checkout-2 to B.
// `cbdash status checkout/payments` against A prints checkout-2's row
// (its line read from the store: no window) as "(on another collector)"
// with "-" for its calls and rates, not "0/s" and "not judged yet (no
// calls)", and checkout-1's with its figures.
func TestStatusSaysAnInstanceIsOnAnotherCollector(t *testing.T) {
	t.Parallel()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn := storetest.Postgres(t)
	clk := clocktest.NewRunning()
	stackOn := func(node string) *stacktest.Stack {
		bus, err := cluster.Open(context.Background(), cluster.Config{URL: dsn, NodeID: node, Clock: clk, Reconnect: time.Second,
			LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bus.Close() })
		return stacktest.Start(t, stacktest.Options{Clock: clk, Path: dsn,
			Collector: func(c *collector.Config) { c.PublishInterval, c.Cluster = 20*time.Millisecond, bus },
			Web:       func(c *web.Config) { c.Anonymous = true }})
	}
	a, b := stackOn("statusa"), stackOn("statusb")
	for i, s := range []*stacktest.Stack{a, b} {
		inst := fmt.Sprintf("checkout-%d", i+1)
		br, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 20}, MinimumCalls: 5,
			OpenDuration: time.Hour, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agent.New(agent.Config{URL: s.AgentURL(), Token: s.AgentToken, Service: "checkout", Instance: inst,
			ReportInterval: 100 * time.Millisecond, Clock: clk})
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
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = ag.Close(ctx)
			cancel()
		})
		for range 5 {
			_ = br.Execute(context.Background(), func(context.Context) error { return nil })
		}
	}
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.Within(t, 30*time.Second, "A listing checkout-2 (on B) from the store", func() bool {
		d, err := a.Collector.Dependency(k)
		return err == nil && len(d.PerInstance) == 2 && d.PerInstance[1].Instance == "checkout-2"
	})

	code, out, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": a.URL()}, "status", "checkout/payments")
	if code != 0 {
		t.Fatalf("status checkout/payments: %d %s", code, stderr)
	}
	t.Logf("status checkout/payments on A:\n%s", out)
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  ") {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	if r := rows["checkout-2"]; r != "checkout-2 closed (on another collector) - - - - -" {
		t.Errorf("checkout-2's row = %q, want its state (on another collector) and - for its open since, calls and rates", r)
	}
	if r := rows["checkout-1"]; !strings.Contains(r, "/s") || strings.Contains(r, "another collector") {
		t.Errorf("A's own checkout-1's row = %q, want its calls per second", r)
	}
	if !strings.Contains(out, "(on another collector: an instance served by another collector;") {
		t.Errorf("status does not explain the rows on another collector:\n%s", out)
	}
}
