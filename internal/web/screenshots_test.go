package web_test

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestScreenshotsOfRunningServer is a tool more than a test: it takes the
// README's screenshots of a running dashboard, for example the demo:
//
//	go run ./cmd/cbdash demo --addr 127.0.0.1:8080 &   # let it run a few minutes
//	CBDASH_SCREENSHOT_URL=http://127.0.0.1:8080 CBDASH_SCREENSHOTS=$PWD/docs/screenshots \
//	  go test -run TestScreenshotsOfRunningServer ./internal/web
//
// It logs in as operator/operator (the demo's account) and saves every
// page (overview, dependency, timeline, incidents and the newest
// incident, holds, audit, alerts) at 1440 px and at 390 px (a phone), in light
// and dark: overview.png, overview-dark.png, overview-390.png,
// overview-390-dark.png and so on. Without CBDASH_SCREENSHOT_URL it is
// skipped.
func TestScreenshotsOfRunningServer(t *testing.T) {
	base := os.Getenv("CBDASH_SCREENSHOT_URL")
	if base == "" || os.Getenv("CBDASH_SCREENSHOTS") == "" {
		t.Skip("set CBDASH_SCREENSHOT_URL and CBDASH_SCREENSHOTS to take screenshots of a running dashboard")
	}
	ctx := browser(t)
	login(t, ctx, base, "operator", "operator")
	dep := "/dependency?" + url.Values{"service": {"checkout"}, "breaker": {"payments"}}.Encode()
	pages := []struct{ path, wait, name string }{
		{"/", `article.tile`, "overview"},
		{dep, `[data-testid=chart]`, "dependency"},
		{"/timeline?range=15m", `h1`, "timeline"},
		{"/incidents", `h1`, "incidents"},
		{"/holds", `h1`, "holds"},
		{"/audit", `#audit`, "audit"},
		{"/alerts", `[data-testid=rules]`, "alerts"},
	}
	run(t, ctx, stepTimeout, "incidents", chromedp.Navigate(base+"/incidents"), chromedp.WaitVisible(css(`h1`)))
	if href := get(t, ctx, "newest incident", chromedp.Evaluate[string](`document.querySelector("[data-testid=incident-row] a")?.getAttribute("href") ?? ""`)); href != "" {
		pages = append(pages, struct{ path, wait, name string }{href, `[data-testid=incident-summary]`, "incident"})
	}
	scheme := func(dark bool) chromedp.Action[chromedp.Void] {
		v := "light"
		if dark {
			v = "dark"
		}
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}})
			return err
		})
	}
	for _, width := range []int64{1440, 390} {
		for _, dark := range []bool{false, true} {
			run(t, ctx, stepTimeout, "viewport", narrow(width), scheme(dark))
			for _, p := range pages {
				name := p.name
				if width != 1440 {
					name += "-" + strconv.FormatInt(width, 10)
				}
				if dark {
					name += "-dark"
				}
				run(t, ctx, stepTimeout, name, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.wait)))
				if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
					t.Errorf("%s scrolls sideways: %s", name, o)
				}
				screenshot(t, ctx, name+".png")
			}
		}
	}
}
