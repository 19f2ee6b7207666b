package web_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// tenInstances starts ten real agents of checkout, each with a real
// payments breaker; checkout-4's call timeout is 2 s where the others'
// is 1 s. It returns the breakers by instance.
func tenInstances(t *testing.T, h *harness) map[string]*breaker.Breaker {
	t.Helper()
	out := map[string]*breaker.Breaker{}
	var agents []*agent.Agent
	t.Cleanup(func() {
		for _, a := range agents {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = a.Close(cctx)
			cancel()
		}
	})
	for i := 1; i <= 10; i++ {
		inst := fmt.Sprintf("checkout-%d", i)
		timeout := time.Second
		if i == 4 {
			timeout = 2 * time.Second
		}
		b, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 20}, MinimumCalls: 5,
			OpenDuration: time.Hour, CallTimeout: timeout, Clock: h.clock})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Config{URL: h.stack.AgentURL(), Token: h.stack.AgentToken, Service: "checkout", Instance: inst,
			ReportInterval: 100 * time.Millisecond, Clock: h.clock})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(b); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		out[inst] = b
	}
	return out
}

// TestBrowserHeatmapSinglesOutTheBadInstance: among ten instances with
// real breakers, checkout-7 fails until it trips; the dependency page's
// heatmap puts it first, drawn open, and the others closed; the drift
// column names checkout-4's different timeout.
func TestBrowserHeatmapSinglesOutTheBadInstance(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	h := start(t, web.Config{LiveInterval: 100 * time.Millisecond}, clocktest.NewRunning())
	h.addUser("vera", cbdash.RoleViewer, "password-vera")
	bs := tenInstances(t, h)
	for inst, b := range bs {
		for range 10 {
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
		if inst == "checkout-7" {
			for range 20 {
				_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("payments down") })
			}
			if b.State() != breaker.Open {
				t.Fatalf("checkout-7 is %v after failures", b.State())
			}
		}
	}
	eventually.True(t, "the per-instance history of all ten, checkout-7 open", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil && d.Instances == 10 && d.ByState["open"] == 1
	})
	login(t, ctx, h.url, "vera", "password-vera")
	run(t, ctx, stepTimeout, "the dependency page's heatmap",
		chromedp.Navigate(h.url+"/dependency?service=checkout&breaker=payments&range=15m"),
		chromedp.WaitVisible(css(`[data-testid=heatmap]`)),
		until(`document.querySelectorAll("[data-testid=heat-row]").length === 10`),
	)
	order := get(t, ctx, "row order", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=heat-row]")].map(r => r.dataset.instance)`))
	if order[0] != "checkout-7" {
		t.Errorf("heatmap order %v, want checkout-7 first", order)
	}
	openRows := get(t, ctx, "open rows", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=heat-row]")].filter(r => r.querySelector("rect.h-open")).map(r => r.dataset.instance)`))
	if len(openRows) != 1 || openRows[0] != "checkout-7" {
		t.Errorf("rows drawn open: %v, want only checkout-7", openRows)
	}
	summary := get(t, ctx, "summary", chromedp.Text(css(`[data-testid=heat-row][data-instance=checkout-7] [data-testid=heat-summary]`)))
	if !strings.HasPrefix(summary, "50% failed (10/20), ") || !strings.Contains(summary, ", not closed ") || !strings.HasSuffix(summary, " in 1 min") {
		t.Errorf("checkout-7 summary %q, want the 10 failures of its 20 admitted calls (it opened at 50 percent; the rest were rejected)", summary)
	}
	drift := get(t, ctx, "drift", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=config-differs]")].map(e => e.textContent)`))
	if len(drift) != 1 || drift[0] != "timeout 2s vs 1s on 9 others" {
		t.Errorf("drift notes %q, want one: timeout 2s vs 1s on 9 others", drift)
	}
	screenshot(t, ctx, "dependency-heatmap.png")
	dark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	})
	run(t, ctx, stepTimeout, "dark", dark, chromedp.Reload(), chromedp.WaitVisible(css(`[data-testid=heatmap]`)))
	screenshot(t, ctx, "dependency-heatmap-dark.png")
	run(t, ctx, stepTimeout, "dark overview", chromedp.Navigate(h.url+"/"), chromedp.WaitVisible(css(`[data-testid=fleet-timeline]`)))
	screenshot(t, ctx, "overview-fleet-dark.png")
}
