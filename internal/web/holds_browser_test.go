package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// addAgent starts one more real agent on s with a payments breaker.
func addAgent(t *testing.T, s *stack, service, instance string) *breaker.Breaker {
	t.Helper()
	tok, err := s.st.CreateAgentToken(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	b, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 20}, MinimumCalls: 5, OpenDuration: time.Hour, Clock: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: s.stack.AgentURL(), Token: tok,
		Service: service, Instance: instance, ReportInterval: 100 * time.Millisecond, Clock: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Register(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return b
}

func TestBrowserFleetWideHoldFromTheDependencyPageReachesTheTileAndTheDrillReport(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	catalog := addAgent(t, s, "catalog", "catalog-1")
	login(t, ctx, s.url, "otto", s.password)
	run(t, ctx, stepTimeout, "both services report payments",
		until(`[...document.querySelectorAll("article.tile")].filter(t => t.querySelector(".brk")?.textContent === "payments").length === 2`))

	const form = `form[data-testid=hold-form] `
	run(t, ctx, stepTimeout, "review a fleet-wide hold from the dependency page",
		chromedp.Navigate(s.url+"/dependency?service=checkout&breaker=payments"),
		chromedp.WaitVisible(css(form)),
		chromedp.Click(css(form+`input[name=action][value=force_open]`)),
		chromedp.Click(css(form+`[data-testid=fleet-selector]`)),
		chromedp.SetValue(css(form+`[data-testid=hold-ttl]`), "20"),
		chromedp.SendKeys(css(form+`[data-testid=hold-reason]`), "drill the payments fallback"),
		chromedp.Click(css(form+`[data-testid=hold-review]`)),
		chromedp.WaitVisible(css(`[data-testid=hold-blast]`)),
	)
	blast := get(t, ctx, "read the blast radius", chromedp.Text(css(`[data-testid=hold-blast]`)))
	for _, want := range []string{"3 instances of 2 services (catalog, checkout) to payments for 20m0s", "catalog/catalog-1, checkout/checkout-1, checkout/checkout-2"} {
		if !strings.Contains(blast, want) {
			t.Errorf("blast radius %q lacks %q", blast, want)
		}
	}
	run(t, ctx, stepTimeout, "confirm: the drill report fills in",
		chromedp.Click(css(`[data-testid=hold-confirm-button]`)),
		chromedp.WaitVisible(css(`[data-testid=report-summary]`)),
	)
	// The report is not live: reload it until every instance answered.
	for range 600 {
		summary := get(t, ctx, "read the summary", chromedp.Text(css(`[data-testid=sum-covered]`)))
		if strings.HasPrefix(summary, "3 instances") && catalog.State() == breaker.ForcedOpen {
			break
		}
		run(t, ctx, stepTimeout, "reload the report", chromedp.Reload(), chromedp.WaitVisible(css(`[data-testid=report-summary]`)))
	}
	for inst, b := range map[string]*breaker.Breaker{"checkout-1": s.breakers["checkout-1"], "checkout-2": s.breakers["checkout-2"], "catalog-1": catalog} {
		if b.State() != breaker.ForcedOpen {
			t.Errorf("%s is %v, want forced open", inst, b.State())
		}
	}

	// Calls made while held are rejected, answered by a fallback, and
	// counted in the report.
	for _, b := range []*breaker.Breaker{s.breakers["checkout-1"], s.breakers["checkout-2"], catalog} {
		for range 5 {
			_ = b.ExecuteWithFallback(context.Background(), func(context.Context) error { return nil }, func(context.Context, error) error { return nil })
		}
	}
	run(t, ctx, stepTimeout, "the overview tiles say held open, and link to the report",
		chromedp.Navigate(s.url+"/"),
		until(`[...document.querySelectorAll("article.tile")].filter(t => t.querySelector(".brk")?.textContent === "payments" && t.querySelector("[data-testid=held-report]")).length === 2`),
	)
	held := get(t, ctx, "read a tile", chromedp.Evaluate[string](payments+`.querySelector("[data-testid=held]").textContent`))
	if !strings.Contains(held, "held open") || !strings.Contains(held, "otto") {
		t.Errorf("tile says %q", held)
	}
	run(t, ctx, stepTimeout, "open the drill report from the tile",
		chromedp.Evaluate[chromedp.Void](payments+`.querySelector("[data-testid=held-report]").click()`),
		chromedp.WaitVisible(css(`[data-testid=report-instances]`)),
	)
	rows := get(t, ctx, "count rows", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=report-instance]").length`))
	if rows != 3 {
		t.Errorf("%d instance rows in the report, want 3", rows)
	}
	for range 600 { // the report is not live: reload until the agents reported the calls
		if get(t, ctx, "read the rejections", chromedp.Text(css(`[data-testid=sum-rejected]`))) == "15" {
			break
		}
		run(t, ctx, stepTimeout, "reload the report", chromedp.Reload(), chromedp.WaitVisible(css(`[data-testid=report-summary]`)))
	}
	if got := get(t, ctx, "read the fallbacks", chromedp.Text(css(`[data-testid=sum-fallbacks]`))); got != "15 (15 served, 0 failed)" {
		t.Errorf("fallback calls %q, want 15 (15 served, 0 failed)", got)
	}
	screenshot(t, ctx, "hold-report.png")

	run(t, ctx, stepTimeout, "the dependency page shows the hold governing its instances",
		chromedp.Navigate(s.url+"/dependency?service=checkout&breaker=payments"),
		chromedp.WaitVisible(css(`[data-testid=current-holds]`)),
		until(`document.querySelector("[data-testid=hold-governs]")?.textContent === "checkout-1, checkout-2"`),
	)
	screenshot(t, ctx, "dependency-holds.png")
	run(t, ctx, stepTimeout, "the holds list", chromedp.Navigate(s.url+"/holds"), chromedp.WaitVisible(css(`[data-testid=hold-row]`)))
	screenshot(t, ctx, "holds.png")
}

// TestBrowserForceOffersOnlyTheMaxHoldAndARefusalHasAWayBack: both forms
// that create holds on the dependency page offer expiries within the
// server's --max-hold (24 h here) and say why there are two; a longer
// expiry (the input's limit taken away, as an old page or a hand-made
// form would post) is refused before the confirmation, on a page that
// says why and leads back to the form.
func TestBrowserForceOffersOnlyTheMaxHoldAndARefusalHasAWayBack(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 1)
	login(t, ctx, s.url, "otto", s.password)
	dep := s.url + "/dependency?service=checkout&breaker=payments"
	run(t, ctx, stepTimeout, "dependency page", chromedp.Navigate(dep), chromedp.WaitVisible(css(`form[data-testid=operator-form]`)))
	for _, sel := range []string{`[data-testid=ttl]`, `[data-testid=hold-ttl]`} {
		if m := get(t, ctx, "max of "+sel, chromedp.Evaluate[string](`document.querySelector("`+sel+`").max`)); m != "1440" {
			t.Errorf("%s offers up to %q minutes, want 1440 (24h, --max-hold)", sel, m)
		}
	}
	for _, sel := range []string{`[data-testid=operator-why]`, `[data-testid=hold-form-why]`} {
		if !get(t, ctx, "explained "+sel, chromedp.Evaluate[bool](`!!document.querySelector("`+sel+`")?.textContent.includes("hold")`)) {
			t.Errorf("%s does not say that it creates a hold", sel)
		}
	}
	run(t, ctx, stepTimeout, "a week's force",
		chromedp.Click(css(`input[name=action][value=force_open]`)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-testid=ttl]").removeAttribute("max")`),
		chromedp.SetValue(css(`[data-testid=ttl]`), "10080"),
		chromedp.SendKeys(css(`[data-testid=reason]`), "a long drill"),
		chromedp.Click(css(`[data-testid=review]`)),
		chromedp.WaitVisible(css(`[data-testid=error-message]`)),
	)
	if msg := get(t, ctx, "message", chromedp.Text(css(`[data-testid=error-message]`))); !strings.Contains(msg, "1440 minutes") || !strings.Contains(msg, "--max-hold") {
		t.Errorf("the refusal says %q, want the limit and --max-hold", msg)
	}
	if n := get(t, ctx, "confirm page", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=confirm]").length`)); n != 0 {
		t.Error("a force over --max-hold got a confirmation page")
	}
	run(t, ctx, stepTimeout, "back to the form",
		chromedp.Click(css(`[data-testid=error-back]`)),
		chromedp.WaitVisible(css(`form[data-testid=operator-form]`)),
	)
	screenshot(t, ctx, "dependency-operator.png")
}

// TestBrowserHoldsPageListsScheduledDrillsWithTheirNextRun: the holds
// page has a table of drill schedules, each with its rule and next run,
// whose target, next run and last run are in full view at 1440 and at
// 390 px, and the page does not scroll sideways.
func TestBrowserHoldsPageListsScheduledDrillsWithTheirNextRun(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	bg := context.Background()
	rule, err := cbdash.ParseScheduleRule("every tue,thu 10:00")
	if err != nil {
		t.Fatal(err)
	}
	stop := cbdash.StopCondition{Metric: cbdash.StopFallbackFailureRate, Above: 20}
	d, err := s.col.CreateSchedule(bg, cbdash.Actor{Name: "otto"}, cbdash.ScheduleRequest{Rule: rule, HoldRequest: cbdash.HoldRequest{
		Selector: cbdash.Selector{Service: "*", Breaker: "payments", Labels: map[string]string{"zone": "a"}}, Action: protocol.ActionForceOpen,
		TTL: 10 * time.Minute, Reason: "the weekly payments fallback drill", StopIf: []cbdash.StopCondition{stop}}})
	if err != nil {
		t.Fatal(err)
	}
	login(t, ctx, s.url, "otto", s.password)
	for _, width := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, "holds page", narrow(width), chromedp.Navigate(s.url+"/holds"),
			chromedp.WaitVisible(css(`[data-testid=schedule-row]`)))
		next := get(t, ctx, "next run", chromedp.Text(css(`[data-schedule="`+d.ID+`"] [data-testid=schedule-next]`)))
		if want := d.NextRun.UTC().Format("Mon 2006-01-02 15:04"); !strings.Contains(next, want) {
			t.Errorf("at %d px the next run reads %q, want %q", width, next, want)
		}
		if off := get(t, ctx, "schedule cells", chromedp.Evaluate[string](offScreen(`[data-testid=schedule-target], [data-testid=schedule-next], [data-testid=schedule-last]`))); off != "" {
			t.Errorf("at %d px a schedule's target, next or last run is cut: %s", width, off)
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("the holds page at %d px scrolls sideways: %s", width, o)
		}
		if width == 390 {
			screenshot(t, ctx, "holds-schedules-390.png")
		} else {
			screenshot(t, ctx, "holds-schedules.png")
		}
	}
}

// TestBrowserHoldsListFitsAWideScreen: at 1440 px the holds list, with
// holds as operators write them (labels, a share, stop conditions, a
// long why, a release), is whole in its box: no column, the why least
// of all, is left behind a sideways scroll.
func TestBrowserHoldsListFitsAWideScreen(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 3)
	bg := context.Background()
	reqs := []cbdash.HoldRequest{
		{Selector: cbdash.Selector{Service: "*", Breaker: "payments", Labels: map[string]string{"team": "checkout", "zone": "eu-west-1a"}, Share: 50},
			Action: protocol.ActionForceOpen, TTL: 20 * time.Minute, StopIf: []cbdash.StopCondition{{Metric: cbdash.StopFallbackFailureRate, Above: 20}},
			Reason: "quarterly payments fallback drill: the cached price list must answer every checkout while the provider is forced open"},
		{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"}, Action: protocol.ActionForceClosed, TTL: 10 * time.Minute,
			Reason: "the provider's maintenance window: keep calling it, its errors are expected and handled by retries upstream"},
	}
	var ids []string
	for i, r := range reqs {
		actor := cbdash.Actor{Name: []string{"schedule s1a2411fef6e00005", "otto"}[i]}
		r.Actor = actor.Name
		h, err := s.col.CreateHold(bg, actor, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID)
	}
	if _, err := s.col.ReleaseHold(bg, cbdash.Actor{Name: "cbdash (stop condition)"}, ids[1], "stop condition: fallback failure rate 86 % > 20 % at 15:02:57"); err != nil {
		t.Fatal(err)
	}
	login(t, ctx, s.url, "otto", s.password)
	run(t, ctx, stepTimeout, "holds page", narrow(1440), chromedp.Navigate(s.url+"/holds"),
		chromedp.WaitVisible(css(`[data-testid=holds]`)))
	if off := get(t, ctx, "hold cells", chromedp.Evaluate[string](offScreen(`[data-testid=holds] td, [data-testid=holds] th`))); off != "" {
		t.Errorf("at 1440 px cells of the holds list are out of its box: %s", off)
	}
	if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
		t.Errorf("the holds page at 1440 px scrolls sideways: %s", o)
	}
	screenshot(t, ctx, "holds-list-1440.png")
}
