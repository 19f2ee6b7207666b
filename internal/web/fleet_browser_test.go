package web_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestBrowserATileOfCollectorAChangesWhenAnInstanceOnBTrips is issue
// 36's check: two collectors over one PostgreSQL schema, the dashboard
// of A in the browser; checkout-1 reports to A, checkout-2 and
// checkout-3 to B. A's payments tile counts the three; checkout-2's
// trip on B turns it open ("open on 1 of 3", the failure rate at the
// trip), and A's /api/v1/events carries the transition; the dependency page on A lists the three
// instances, B's from the store. At 1440 and 390 px the tile stays in
// the viewport.
func TestBrowserATileOfCollectorAChangesWhenAnInstanceOnBTrips(t *testing.T) {
	t.Parallel()
	postgresOnly(t)
	ctx := browser(t)
	a, b := twoCollectors(t, "browsera", "browserb")
	clk := a.clock
	breakers := map[string]*breaker.Breaker{}
	for i, s := range []*stacktest.Stack{a.stack, b, b} {
		inst := fmt.Sprintf("checkout-%d", i+1)
		breakers[inst] = fleetAgent(t, clk, s, inst)
	}

	login(t, ctx, a.url, "otto", "operator-password")
	run(t, ctx, stepTimeout, "A's tile counts the three instances",
		until(payments+`?.querySelector("[data-testid=instances]").textContent === "closed on 3 of 3"`))
	if n := a.col.Dependencies()[0].PerInstance; len(n) != 1 {
		t.Fatalf("A's live state holds %d lines of payments, want 1 (checkout-1): B's are summarised", len(n))
	}
	// A's event stream, read in the page (the session's cookie): open
	// once its snapshot has arrived, so that the trip is an event of it.
	run(t, ctx, stepTimeout, "A's event stream open",
		chromedp.Evaluate[chromedp.Void](`window.cbdashEvents = ""; fetch("/api/v1/events?snapshot=1").then(async r => {
			const rd = r.body.getReader(), dec = new TextDecoder();
			for (;;) { const {value, done} = await rd.read(); if (done) break; window.cbdashEvents += dec.decode(value); }
		}); true`),
		until(`window.cbdashEvents.includes("payments")`))
	screenshot(t, ctx, "fleet-a-closed-1440.png")

	trip(t, breakers["checkout-2"])
	run(t, ctx, stepTimeout, "A's tile open on 1 of 3",
		until(payments+`?.dataset.state === "open" && `+payments+`.querySelector("[data-testid=instances]").textContent.includes("1 of 3")`))
	// The rates at checkout-2's trip (it has no line on A: its trip came
	// with its transition, then B's summary).
	run(t, ctx, stepTimeout, "A's tile shows the rate at the trip",
		until(payments+`.textContent.includes("tripped at")`))
	run(t, ctx, stepTimeout, "A's event stream carries checkout-2's trip",
		until(`window.cbdashEvents.includes('"instance":"checkout-2"') && window.cbdashEvents.includes('"to":"open"')`))
	for _, w := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, fmt.Sprintf("%d px", w), narrow(w))
		r := get(t, ctx, "tile geometry", chromedp.Evaluate[[]float64](payments+`.getBoundingClientRect().toJSON() && [`+payments+`.getBoundingClientRect().left, `+payments+`.getBoundingClientRect().right, document.documentElement.clientWidth]`))
		if r[0] < 0 || r[1] > r[2]+1 || r[1]-r[0] < 100 {
			t.Errorf("at %d px the open tile spans %v-%v of %v px", w, r[0], r[1], r[2])
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("at %d px the overview scrolls sideways: %s", w, o)
		}
		screenshot(t, ctx, fmt.Sprintf("fleet-a-open-%d.png", w))
	}

	run(t, ctx, stepTimeout, "A's dependency page", narrow(1440),
		chromedp.Evaluate[chromedp.Void](payments+`.querySelector("a.name").click()`), chromedp.WaitVisible(css(`[data-testid=instance-row]`)))
	rows := get(t, ctx, "instance rows", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=instance-row]")].map(r => r.cells[0].textContent.trim())`))
	got := strings.Join(rows, " ")
	for _, inst := range []string{"checkout-1", "checkout-2", "checkout-3"} {
		if !strings.Contains(got, inst) {
			t.Errorf("A's dependency page lists %q, not %s", got, inst)
		}
	}
	screenshot(t, ctx, "fleet-a-dependency-1440.png")
}

// postgresOnly skips the test without PostgreSQL (CBDASH_TEST_POSTGRES),
// or fails it in CI.
func postgresOnly(t *testing.T) {
	t.Helper()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
}

// twoCollectors starts two collectors over one new PostgreSQL schema,
// each on the cluster bus (nodes nodeA and nodeB), on one running clock:
// A is a harness (its dashboard is the one the browser opens; operator
// otto, password "operator-password"), B a stack whose dashboard no test
// looks at. Each publishes every 20 ms.
func twoCollectors(t *testing.T, nodeA, nodeB string) (a *harness, b *stacktest.Stack) {
	t.Helper()
	dsn := storetest.Postgres(t)
	clk := clocktest.NewRunning()
	busOf := func(node string) cluster.Bus {
		bus, err := cluster.Open(context.Background(), cluster.Config{URL: dsn, NodeID: node, Clock: clk, Reconnect: time.Second,
			LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bus.Close() })
		return bus
	}
	a = &harness{t: t, clock: clk, users: map[string]string{}, reported: map[string]reported{}}
	busA := busOf(nodeA)
	a.run(stacktest.Options{Clock: clk, Path: dsn,
		Collector: func(c *collector.Config) { c.PublishInterval, c.Cluster = 20*time.Millisecond, busA },
		Web: func(w *web.Config) {
			c := wired(web.Config{LiveInterval: 20 * time.Millisecond, PasswordCost: bcrypt.MinCost}, *w)
			*w, a.cfg = c, c
		}})
	busB := busOf(nodeB)
	b = stacktest.Start(t, stacktest.Options{Clock: clk, Path: dsn,
		Collector: func(c *collector.Config) { c.PublishInterval, c.Cluster = 20*time.Millisecond, busB }})
	a.addUser("otto", cbdash.RoleOperator, "operator-password")
	return a, b
}

// fleetAgent starts instance inst of checkout with a payments breaker
// reporting to s, warmed with 5 successes.
func fleetAgent(t *testing.T, clk clock.Clock, s *stacktest.Stack, inst string) *breaker.Breaker {
	t.Helper()
	return fleetAgentOf(t, clk, s, inst, func(a *agent.Agent, b *breaker.Breaker) error { return a.Register(b) })
}

// fleetAgentOf is fleetAgent with the payments breaker registered on its
// agent by register.
func fleetAgentOf(t *testing.T, clk clock.Clock, s *stacktest.Stack, inst string, register func(*agent.Agent, *breaker.Breaker) error) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("payments", breaker.Config{
		Window: breaker.Window{Kind: breaker.CountWindow, Size: 20}, MinimumCalls: 5, OpenDuration: time.Hour, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: s.AgentURL(), Token: s.AgentToken, Service: "checkout", Instance: inst,
		Labels: map[string]string{"zone": "a"}, ReportInterval: 100 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := register(a, b); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.Close(cctx)
		ccancel()
	})
	for range 5 {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	return b
}
