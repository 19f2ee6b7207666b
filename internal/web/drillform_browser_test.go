package web_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// notAtOwnCentre names the elements sel selects that are not the element
// at their own centre once scrolled into view (covered, clipped or
// outside the viewport); "" when every one is.
func notAtOwnCentre(sel string) string {
	return `[...document.querySelectorAll("` + sel + `")].filter(e => {
		e.scrollIntoView({block: "center", inline: "nearest"});
		const r = e.getBoundingClientRect();
		if (r.width === 0 || r.height === 0) return true;
		const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return !(at === e || e.contains(at));
	}).map(e => (e.dataset.testid || e.name) + " at " + JSON.stringify(e.getBoundingClientRect().toJSON())).join("; ")`
}

// elementShot saves a PNG of the element sel selects into
// $CBDASH_SCREENSHOTS (when set).
func elementShot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	dir := os.Getenv("CBDASH_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.Screenshot(css(sel)))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// opControls are the operator panel's inputs and its submit button.
const opControls = `form[data-testid=operator-form] input:not([type=hidden]), form[data-testid=operator-form] select, form[data-testid=operator-form] button[type=submit]`

// TestBrowserOperatorPanelSchedulesADrill: the dependency page's operator
// panel offers what the fleet-wide hold form offers (stop conditions,
// dropping defaults with a reason, steps) and when to run (now, once,
// weekly); at 1440 and at 390 px each of its inputs and its submit
// button is the element at its own centre and the page does not scroll
// sideways at 390. A weekly drill submitted from it goes through the
// hold's confirmation (its next run, pre-flight, the blast radius) and
// is listed with the schedules on the holds page.
func TestBrowserOperatorPanelSchedulesADrill(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	login(t, ctx, s.url, "otto", s.password)
	dep := s.url + "/dependency?service=checkout&breaker=payments"
	for _, width := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, "the operator panel", narrow(width), chromedp.Navigate(dep),
			chromedp.WaitVisible(css(`[data-testid=op-when]`)))
		if n := get(t, ctx, "controls", chromedp.Evaluate[int](`document.querySelectorAll("`+opControls+`").length`)); n < 15 {
			t.Fatalf("the operator form has %d controls, want its action, scope, expiry, reason, drill and schedule fields", n)
		}
		if bad := get(t, ctx, "hit test", chromedp.Evaluate[string](notAtOwnCentre(opControls))); bad != "" {
			t.Errorf("at %d px these operator controls are not the element at their centre: %s", width, bad)
		}
		if width == 390 {
			if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
				t.Errorf("the dependency page at 390 px scrolls sideways: %s", o)
			}
		}
		run(t, ctx, stepTimeout, "scroll to the panel", chromedp.ScrollIntoView(css(`[data-testid=op-drill]`)))
		if width == 390 {
			screenshot(t, ctx, "dependency-operator-drill-390.png")
			elementShot(t, ctx, `[data-testid=operator]`, "operator-panel-390.png")
		} else {
			screenshot(t, ctx, "dependency-operator-drill.png")
		}
	}

	run(t, ctx, stepTimeout, "schedule a weekly drill from the operator panel", narrow(1440),
		chromedp.Navigate(dep),
		chromedp.WaitVisible(css(`form[data-testid=operator-form]`)),
		chromedp.Click(css(`form[data-testid=operator-form] input[name=action][value=force_open]`)),
		chromedp.SetValue(css(`[data-testid=ttl]`), "10"),
		chromedp.SendKeys(css(`[data-testid=reason]`), "weekly payments fallback drill"),
		chromedp.SendKeys(css(`[data-testid=op-stop-if]`), "fallback-failure-rate>20%"),
		chromedp.Click(css(`[data-testid=op-when-weekly]`)),
		chromedp.SetValue(css(`[data-testid=op-day]`), "tue"),
		chromedp.SetValue(css(`[data-testid=op-time]`), "10:00"),
		chromedp.Click(css(`form[data-testid=operator-form] [data-testid=review]`)),
		chromedp.WaitVisible(css(`[data-testid=hold-confirm]`)),
	)
	blast := get(t, ctx, "the confirmation", chromedp.Text(css(`[data-testid=hold-confirm]`)))
	for _, want := range []string{"Schedule a drill: force open checkout/payments", "Runs every tue 10:00 (UTC), for 10m", "the next run is Tue ",
		"fallback-failure-rate>20%", "2 instances"} {
		if !strings.Contains(blast, want) {
			t.Errorf("the confirmation %q lacks %q", blast, want)
		}
	}
	screenshot(t, ctx, "dependency-schedule-confirm.png")
	run(t, ctx, stepTimeout, "confirm: the schedules list",
		chromedp.Click(css(`[data-testid=hold-confirm-button]`)),
		chromedp.WaitVisible(css(`[data-testid=schedule-row]`)),
	)
	row := get(t, ctx, "the schedule", chromedp.Text(css(`[data-testid=schedule-row]`)))
	for _, want := range []string{"checkout/payments", "every tue 10:00", "fallback-failure-rate>20%", "otto", "weekly payments fallback drill"} {
		if !strings.Contains(row, want) {
			t.Errorf("the schedule row %q lacks %q", row, want)
		}
	}
	ds, err := s.col.Schedules(t.Context(), false)
	if err != nil || len(ds) != 1 || ds[0].Selector.String() != "checkout/payments" || len(ds[0].StopIf) != 1 || ds[0].TTL.Minutes() != 10 {
		t.Fatalf("stored schedules %+v, %v", ds, err)
	}
	screenshot(t, ctx, "holds-scheduled-from-dependency.png")
}

// holdControls are the fleet-wide hold form's inputs and its submit
// button.
const holdControls = `form[data-testid=hold-form] input:not([type=hidden]), form[data-testid=hold-form] select, form[data-testid=hold-form] button[type=submit]`

// TestBrowserFleetHoldFormSchedulesADrill: the fleet-wide hold form has
// the same When fields as the operator panel; at 1440 and 390 px each
// of its controls is the element at its own centre, and a drill of
// */payments scheduled once from it is confirmed and listed.
func TestBrowserFleetHoldFormSchedulesADrill(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	login(t, ctx, s.url, "otto", s.password)
	dep := s.url + "/dependency?service=checkout&breaker=payments"
	for _, width := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, "the fleet form", narrow(width), chromedp.Navigate(dep),
			chromedp.WaitVisible(css(`[data-testid=hold-when]`)))
		if bad := get(t, ctx, "hit test", chromedp.Evaluate[string](notAtOwnCentre(holdControls))); bad != "" {
			t.Errorf("at %d px these fleet form controls are not the element at their centre: %s", width, bad)
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("the dependency page at %d px scrolls sideways: %s", width, o)
		}
	}
	at := s.clock.Now().UTC().Add(48 * time.Hour).Truncate(time.Minute)
	run(t, ctx, stepTimeout, "schedule a fleet drill once", narrow(1440),
		chromedp.Navigate(dep),
		chromedp.WaitVisible(css(`form[data-testid=hold-form]`)),
		chromedp.Click(css(`form[data-testid=hold-form] input[name=action][value=force_open]`)),
		chromedp.Click(css(`[data-testid=fleet-selector]`)),
		chromedp.SetValue(css(`[data-testid=hold-ttl]`), "5"),
		chromedp.SendKeys(css(`[data-testid=hold-reason]`), "the fleet's payments fallback drill"),
		chromedp.Click(css(`[data-testid=hold-when-once]`)),
		chromedp.SetValue(css(`[data-testid=hold-at]`), at.Format("2006-01-02T15:04")),
		chromedp.Click(css(`[data-testid=hold-review]`)),
		chromedp.WaitVisible(css(`[data-testid=hold-confirm]`)),
	)
	blast := get(t, ctx, "the confirmation", chromedp.Text(css(`[data-testid=hold-confirm]`)))
	if !strings.Contains(blast, "Schedule a drill: force open */payments") {
		t.Errorf("the confirmation %q does not schedule a drill of */payments", blast)
	}
	run(t, ctx, stepTimeout, "confirm: the schedules list",
		chromedp.Click(css(`[data-testid=hold-confirm-button]`)),
		chromedp.WaitVisible(css(`[data-testid=schedule-row]`)),
	)
	ds, err := s.col.Schedules(t.Context(), false)
	if err != nil || len(ds) != 1 || ds[0].Selector.String() != "*/payments" || !ds[0].NextRun.Equal(at) || ds[0].TTL != 5*time.Minute {
		t.Fatalf("stored schedules %+v, %v: want */payments once at %v for 5m", ds, err, at)
	}
}
