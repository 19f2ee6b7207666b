package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
)

// incidentBrowser starts headless Debian chromium; without it the test is
// skipped, unless CI is set.
func incidentBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is missing and CI is set")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 1000))
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

func incidentDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func incidentEval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func TestBrowserIncidentPageRendersLanesAndMarkers(t *testing.T) {
	ctx := incidentBrowser(t)
	h, id, start := newIncidentHarness(t)
	base := h.http.URL
	incidentDo(t, ctx, "log in",
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`form[data-testid=login-form]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=user]`), "otto"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), h.users["otto"]),
		chromedp.Submit(chromedp.CSS(`form[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=fleet]`)),
	)
	incidentDo(t, ctx, "the list", chromedp.Navigate(base+"/incidents"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=incident-row]`)))
	// A new incident shows up in the open list by itself.
	if _, err := h.st.CreateIncident(context.Background(), cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "catalog", Breaker: "pricing"},
		Start: start.Add(5 * time.Minute), Open: true, Instances: []string{"catalog-1"}, Opens: 1, FirstInstance: "catalog-1"}); err != nil {
		t.Fatal(err)
	}
	incidentDo(t, ctx, "the new incident appears without a reload",
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("[data-testid=incident-row]").length === 3 && document.body.textContent.includes("catalog/pricing")`,
			chromedp.WithPollingInterval(100*time.Millisecond)))
	incidentDo(t, ctx, "open the incident from the list",
		chromedp.Click(chromedp.CSS(`a[href="/incidents/`+strconv.FormatInt(id, 10)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=instance-lane]`)),
	)
	if n := incidentEval[int](t, ctx, `document.querySelectorAll("[data-testid=instance-lane]").length`); n != 2 {
		t.Errorf("%d lanes, want 2", n)
	}
	kinds := incidentEval[string](t, ctx, `[...document.querySelectorAll("[data-testid=marker]")].map(m => m.dataset.kind).sort().join(",")`)
	if kinds != "command,config,end,start" {
		t.Errorf("markers %q, want command, config, end, start", kinds)
	}
	// The lanes are drawn: every span has a width and a colour from the
	// stylesheet, and the forced-open stretch of checkout-1 is there.
	states := incidentEval[string](t, ctx, `[...document.querySelectorAll("[data-instance=checkout-1] [data-testid=lane-span]")].map(r => r.dataset.state).join(",")`)
	if states != "closed,open,half-open,open,forced-open,closed" {
		t.Errorf("checkout-1 lane %q", states)
	}
	painted := incidentEval[bool](t, ctx, `[...document.querySelectorAll("[data-testid=lane-span]")].every(r => r.getBoundingClientRect().width > 0 && getComputedStyle(r).fill !== "none" && getComputedStyle(r).fill !== "rgb(0, 0, 0)")`)
	if !painted {
		t.Error("some lane span has no width or no fill colour")
	}
	// One time axis: the lanes and the charts are the same width.
	same := incidentEval[bool](t, ctx, `(() => { const a = document.querySelector("#incident-lanes svg").getBoundingClientRect(), b = document.querySelector("#chart-requests svg").getBoundingClientRect(); return Math.abs(a.width - b.width) < 1 })()`)
	if !same {
		t.Error("the lanes and the charts do not share a width")
	}
	incidentDo(t, ctx, "add a note", chromedp.SendKeys(chromedp.CSS(`[data-testid=note-text]`), "rolled back payments"),
		chromedp.Click(chromedp.CSS(`[data-testid=note-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=note]`)))
	if note := incidentEval[string](t, ctx, `document.querySelector("[data-testid=note]").textContent`); !strings.Contains(note, "otto") || !strings.Contains(note, "rolled back payments") {
		t.Errorf("note %q", note)
	}
	if dir := os.Getenv("CBDASH_SCREENSHOTS"); dir != "" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "incident.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
