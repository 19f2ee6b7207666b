package web_test

import (
	"context"
	"net/url"
	"os"
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
// It logs in as operator/operator (the demo's account) and saves
// overview.png, overview-dark.png, dependency.png, audit.png,
// timeline.png and alerts.png. Without CBDASH_SCREENSHOT_URL it is skipped.
func TestScreenshotsOfRunningServer(t *testing.T) {
	base := os.Getenv("CBDASH_SCREENSHOT_URL")
	if base == "" || os.Getenv("CBDASH_SCREENSHOTS") == "" {
		t.Skip("set CBDASH_SCREENSHOT_URL and CBDASH_SCREENSHOTS to take screenshots of a running dashboard")
	}
	ctx := browser(t)
	login(t, ctx, base, "operator", "operator")
	dep := "/dependency?" + url.Values{"service": {"checkout"}, "breaker": {"payments"}, "range": {"15m"}}.Encode()
	for _, p := range []struct{ path, wait, file string }{
		{"/", `article.tile`, "overview.png"},
		{dep, `[data-testid=chart]`, "dependency.png"},
		{"/audit", `#audit`, "audit.png"},
		{"/timeline?range=15m", `[data-testid=timeline]`, "timeline.png"},
		{"/alerts", `[data-testid=rules]`, "alerts.png"},
	} {
		run(t, ctx, stepTimeout, p.file, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.wait)))
		screenshot(t, ctx, p.file)
	}
	dark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	})
	run(t, ctx, stepTimeout, "dark overview", dark, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`article.tile`)))
	screenshot(t, ctx, "overview-dark.png")
	run(t, ctx, stepTimeout, "dark dependency", chromedp.Navigate(base+dep), chromedp.WaitVisible(css(`[data-testid=chart]`)))
	screenshot(t, ctx, "dependency-dark.png")
}
