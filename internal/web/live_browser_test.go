package web_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// trip fails calls through b until it opens.
func trip(t *testing.T, b *breaker.Breaker) {
	t.Helper()
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("payments down") })
	}
	if b.State() != breaker.Open {
		t.Fatalf("breaker is %v after failures", b.State())
	}
}

// sinceAt parses the datetime of an open-since element.
func sinceAt(t *testing.T, ctx context.Context, sel string) time.Time {
	t.Helper()
	iso := get(t, ctx, "open since of "+sel, chromedp.Evaluate[string](`document.querySelector(`+"`"+sel+"`"+`)?.querySelector("time")?.getAttribute("datetime") ?? ""`))
	at, err := time.Parse(time.RFC3339Nano, iso)
	if err != nil {
		t.Fatalf("open since of %s: %q: %v", sel, iso, err)
	}
	return at
}

func TestBrowserOpenSinceOnTileAndDependencyPage(t *testing.T) {
	ctx := browser(t)
	s := startStack(t, 2)
	login(t, ctx, s.url, "otto", s.password)
	run(t, ctx, stepTimeout, "overview fills in", until(payments+`?.querySelector("[data-testid=instances]").textContent === "closed on 2 of 2"`))
	if n := get(t, ctx, "no open since while closed", chromedp.Evaluate[int](payments+`.querySelectorAll("[data-testid=open-since]").length`)); n != 0 {
		t.Fatalf("a closed tile shows %d open-since lines", n)
	}
	tripped := s.clock.Now()
	trip(t, s.breakers["checkout-1"])
	run(t, ctx, stepTimeout, "tile says open since",
		until(payments+`?.querySelector("[data-testid=open-since]")?.textContent.includes("open since")`))
	tileSel := `article.tile[data-state=open] [data-testid=open-since]`
	if at := sinceAt(t, ctx, tileSel); at.Sub(tripped).Abs() > time.Second {
		t.Errorf("tile open since %v, want the trip at %v", at, tripped)
	}
	// The duration ticks in the page, without a live update of the tile.
	first := get(t, ctx, "duration", chromedp.Text(css(tileSel+` [data-since]`)))
	run(t, ctx, stepTimeout, "duration ticks", until(`document.querySelector("`+tileSel+` [data-since]").textContent !== "`+first+`"`))
	screenshot(t, ctx, "open-since-tile.png")

	run(t, ctx, stepTimeout, "dependency page",
		chromedp.Evaluate[chromedp.Void](payments+`.querySelector("a.name").click()`),
		chromedp.WaitVisible(css(`#dep-head [data-testid=open-since]`)),
	)
	if at := sinceAt(t, ctx, `#dep-head [data-testid=open-since]`); at.Sub(tripped).Abs() > time.Second {
		t.Errorf("header open since %v, want the trip at %v", at, tripped)
	}
	cells := get(t, ctx, "instance open since", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=instance-row]")].map(r => r.cells[0].textContent.trim() + ": " + r.querySelector("[data-testid=instance-open-since]").textContent.trim())`))
	if len(cells) != 2 || !strings.HasPrefix(cells[0], "checkout-1: "+tripped.UTC().Format("15:04")) || cells[1] != "checkout-2: –" {
		t.Errorf("instance open since %q, want checkout-1 since the trip (%s) and checkout-2 none", cells, tripped.UTC().Format("15:04:05"))
	}
}
