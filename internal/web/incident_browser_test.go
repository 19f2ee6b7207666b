package web_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
)

func TestBrowserIncidentPageRendersLanesAndMarkers(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	h, id, start := newIncidentHarness(t)
	base := h.url
	login(t, ctx, base, "otto", h.users["otto"])
	run(t, ctx, stepTimeout, "the list", chromedp.Navigate(base+"/incidents"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=incident-row]`)))
	// A new incident shows up in the open list by itself.
	if _, err := h.st.CreateIncident(context.Background(), cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "catalog", Breaker: "pricing"},
		Start: start.Add(5 * time.Minute), Open: true, Instances: []string{"catalog-1"}, Opens: 1, FirstInstance: "catalog-1"}); err != nil {
		t.Fatal(err)
	}
	// The live socket redraws the list on the harness's virtual clock.
	eventually.True(t, "the new incident appears without a reload", func() bool {
		h.virtual().Advance(500 * time.Millisecond)
		return get(t, ctx, "list", chromedp.Evaluate[bool](`document.querySelectorAll("[data-testid=incident-row]").length === 3 && document.body.textContent.includes("catalog/pricing")`))
	})
	run(t, ctx, stepTimeout, "open the incident from the list",
		chromedp.Click(chromedp.CSS(`a[href="/incidents/`+strconv.FormatInt(id, 10)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=instance-lane]`)),
	)
	if n := get(t, ctx, "evaluate", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=instance-lane]").length`)); n != 2 {
		t.Errorf("%d lanes, want 2", n)
	}
	kinds := get(t, ctx, "evaluate", chromedp.Evaluate[string](`[...document.querySelectorAll("[data-testid=marker]")].map(m => m.dataset.kind).sort().join(",")`))
	if kinds != "command,config,end,start" {
		t.Errorf("markers %q, want command, config, end, start", kinds)
	}
	// The lanes are drawn: every span has a width and a colour from the
	// stylesheet, and the forced-open stretch of checkout-1 is there.
	states := get(t, ctx, "evaluate", chromedp.Evaluate[string](`[...document.querySelectorAll("[data-instance=checkout-1] [data-testid=lane-span]")].map(r => r.dataset.state).join(",")`))
	if states != "closed,open,half-open,open,forced-open,closed" {
		t.Errorf("checkout-1 lane %q", states)
	}
	painted := get(t, ctx, "evaluate", chromedp.Evaluate[bool](`[...document.querySelectorAll("[data-testid=lane-span]")].every(r => r.getBoundingClientRect().width > 0 && getComputedStyle(r).fill !== "none" && getComputedStyle(r).fill !== "rgb(0, 0, 0)")`))
	if !painted {
		t.Error("some lane span has no width or no fill colour")
	}
	// One time axis: the lanes and the charts are the same width.
	same := get(t, ctx, "evaluate", chromedp.Evaluate[bool](`(() => { const a = document.querySelector("#incident-lanes svg").getBoundingClientRect(), b = document.querySelector("#chart-requests svg").getBoundingClientRect(); return Math.abs(a.width - b.width) < 1 })()`))
	if !same {
		t.Error("the lanes and the charts do not share a width")
	}
	run(t, ctx, stepTimeout, "add a note", chromedp.SendKeys(chromedp.CSS(`[data-testid=note-text]`), "rolled back payments"),
		chromedp.Click(chromedp.CSS(`[data-testid=note-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=note]`)))
	if note := get(t, ctx, "evaluate", chromedp.Evaluate[string](`document.querySelector("[data-testid=note]").textContent`)); !strings.Contains(note, "otto") || !strings.Contains(note, "rolled back payments") {
		t.Errorf("note %q", note)
	}
	screenshot(t, ctx, "incident.png")
}

// TestBrowserIncidentPageUpdatesWhileOpen opens the page of an open
// incident, then trips another instance's breaker: the trip shows in the
// incident's timeline, and the incident's new instance in its summary,
// without a reload.
func TestBrowserIncidentPageUpdatesWhileOpen(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	login(t, ctx, s.url, "otto", s.password)
	trip(t, s.breakers["checkout-1"])
	inc := cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Start: s.clock.Now().Add(-time.Second), Open: true, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1"}
	id, err := s.st.CreateIncident(context.Background(), inc)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, stepTimeout, "the incident page, live",
		chromedp.Navigate(s.url+"/incidents/"+strconv.FormatInt(id, 10)),
		chromedp.WaitVisible(css(`[data-testid=incident-summary]`)),
		until(`document.body.dataset.live === "true"`),
		until(`document.getElementById("conn").hidden === true`))
	run(t, ctx, stepTimeout, "mark the page", chromedp.Evaluate[chromedp.Void](`window.cbdashSamePage = true`))

	trip(t, s.breakers["checkout-2"])
	run(t, ctx, stepTimeout, "the trip shows in the timeline",
		until(`[...document.querySelectorAll("[data-testid=timeline-row]")].some(r => r.textContent.includes("checkout-2") && r.textContent.includes("closed → open"))`))
	inc.ID = id
	inc.Instances, inc.Opens = []string{"checkout-1", "checkout-2"}, 2
	if err := s.st.UpdateIncident(context.Background(), inc); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, stepTimeout, "the summary follows the incident",
		until(`document.querySelector("[data-testid=sum-instances]").textContent.startsWith("2 (checkout-1, checkout-2)")`))
	if !get(t, ctx, "no reload", chromedp.Evaluate[bool](`window.cbdashSamePage === true`)) {
		t.Error("the page was reloaded")
	}
	screenshot(t, ctx, "incident-live.png")
}
