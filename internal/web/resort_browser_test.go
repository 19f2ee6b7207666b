package web_test

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// watchOverlaps starts sampling, at every animation frame, the tiles'
// boxes as drawn (getBoundingClientRect includes an animation's
// transform): window.cbdashOverlaps collects every pair that overlaps by
// more than a pixel each way, window.cbdashFrames counts the frames and
// window.cbdashFramesSinceOrder the frames since the tile order last
// changed.
const watchOverlaps = `(() => {
	window.cbdashOverlaps = []; window.cbdashFrames = 0; window.cbdashFramesSinceOrder = 0;
	let last = "";
	const frame = () => {
		const tiles = [...document.querySelectorAll("article.tile")];
		const order = tiles.map(t => t.id).join(" ");
		if (order !== last) { last = order; window.cbdashFramesSinceOrder = 0; }
		const r = tiles.map(t => t.getBoundingClientRect());
		for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++) {
			const w = Math.min(r[i].right, r[j].right) - Math.max(r[i].left, r[j].left);
			const h = Math.min(r[i].bottom, r[j].bottom) - Math.max(r[i].top, r[j].top);
			if (w > 1 && h > 1 && window.cbdashOverlaps.length < 20) window.cbdashOverlaps.push(tiles[i].id + " over " + tiles[j].id + " by " + Math.round(w) + "x" + Math.round(h) + " px at frame " + window.cbdashFrames);
		}
		window.cbdashFrames++; window.cbdashFramesSinceOrder++;
		requestAnimationFrame(frame);
	};
	requestAnimationFrame(frame);
})()`

// TestBrowserTilesNeverOverlapWhileReSorting trips the breaker of the tile
// shown last, so that it moves first, and samples every animation frame
// from before the trip until 60 frames after the new order: at no frame
// does a tile cover another (a click lands on the tile drawn there).
func TestBrowserTilesNeverOverlapWhileReSorting(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	login(t, ctx, s.url, "otto", s.password)
	order := `[...document.querySelectorAll("article.tile .brk")].map(e => e.textContent)`
	run(t, ctx, stepTimeout, "both tiles, payments last (closed, by name)",
		until(order+`.length === 2 && `+order+`[1] === "payments"`),
		chromedp.Evaluate[chromedp.Void](watchOverlaps),
		until(`window.cbdashFrames > 5`))
	trip(t, s.breakers["checkout-1"])
	run(t, ctx, stepTimeout, "payments first, then 60 frames",
		until(order+`[0] === "payments"`),
		until(`window.cbdashFramesSinceOrder > 60`))
	overlaps := get(t, ctx, "overlaps", chromedp.Evaluate[[]string](`window.cbdashOverlaps`))
	frames := get(t, ctx, "frames", chromedp.Evaluate[int](`window.cbdashFrames`))
	for _, o := range overlaps {
		t.Errorf("tiles overlap while re-sorting: %s", o)
	}
	t.Logf("%d frames sampled", frames)
}
