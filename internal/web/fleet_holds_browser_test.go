package web_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// unheld is a payments breaker reported as a breaker of a library that
// cannot hold breakers open or closed, as the sony/gobreaker v2 adapter
// (sdk/adapter/gobreaker, a module of its own) reports one: an
// agent.Source that is no agent.Commander, so that its agent's hello
// says holds_unsupported and the agent refuses commands for it.
type unheld struct{ b *breaker.Breaker }

// Describe declares the breaker's own settings (as the other instances'
// agents do, so that only the library and holds differ on the page).
func (u unheld) Describe() protocol.BreakerConfig {
	c := u.b.Config()
	return protocol.BreakerConfig{Name: u.b.Name(), Library: "sony/gobreaker v2", WindowKind: "count", WindowSize: c.Window.Size,
		FailureRateThreshold: c.FailureRateThreshold, SlowCallDurationMillis: c.SlowCallDuration.Milliseconds(),
		SlowCallRateThreshold: c.SlowCallRateThreshold, MinimumCalls: c.MinimumCalls, OpenDurationMillis: c.OpenDuration.Milliseconds(),
		HalfOpenMaxCalls: c.HalfOpenMaxCalls, HalfOpenSuccessThreshold: c.HalfOpenSuccessThreshold}
}

func (u unheld) Snapshot() breaker.Snapshot { return u.b.Snapshot() }

func (u unheld) Subscribe(fn func(breaker.Transition)) (cancel func()) { return u.b.Subscribe(fn) }

// blastGeometry is, in CSS px, the blast radius's and the confirmation
// button's boxes (left, right, top, bottom each) and the viewport's
// width.
const blastGeometry = `(() => {
	const b = document.querySelector("[data-testid=hold-blast]").getBoundingClientRect();
	const k = document.querySelector("[data-testid=hold-confirm-button]").getBoundingClientRect();
	return [b.left, b.right, b.top, b.bottom, k.left, k.right, k.top, k.bottom, document.documentElement.clientWidth];
})()`

// TestBrowserTheHoldsPageOfCollectorACountsInstancesOnB: two collectors
// over one PostgreSQL schema, the dashboard of A in the browser;
// checkout-1 reports to A, checkout-2 and checkout-3 to B, and
// checkout-4 to B from a breaker that cannot be held. A holds a line of
// checkout-1 only, yet on A the dependency page says checkout-4 cannot
// be held, and the blast radius of a hold of checkout/payments reviewed
// from its form counts and names the three that can (B's from the
// store), of the four live, and lists checkout-4 as not held; at 1440
// and 390 px it is whole in the viewport, above the confirmation button
// and clear of it. Confirmed on A, the hold reaches B's instances (their
// breakers forced open, checkout-4's left alone), A's drill report and
// holds list count the three covered, and on A's dependency page it
// governs those three, not checkout-4.
func TestBrowserTheHoldsPageOfCollectorACountsInstancesOnB(t *testing.T) {
	t.Parallel()
	postgresOnly(t)
	ctx := browser(t)
	a, b := twoCollectors(t, "holdsa", "holdsb")
	breakers := map[string]*breaker.Breaker{}
	for i, s := range []*stacktest.Stack{a.stack, b, b} {
		inst := fmt.Sprintf("checkout-%d", i+1)
		breakers[inst] = fleetAgent(t, a.clock, s, inst)
	}
	breakers["checkout-4"] = fleetAgentOf(t, a.clock, b, "checkout-4", func(ag *agent.Agent, br *breaker.Breaker) error {
		return ag.RegisterSource(unheld{br})
	})
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}

	login(t, ctx, a.url, "otto", "operator-password")
	run(t, ctx, stepTimeout, "A's tile counts the four instances",
		until(payments+`?.querySelector("[data-testid=instances]").textContent === "closed on 4 of 4"`))
	if n := a.col.Dependencies()[0].PerInstance; len(n) != 1 {
		t.Fatalf("A's live state holds %d lines of payments, want 1 (checkout-1): B's are summarised", len(n))
	}
	// The tile counts B's summaries; what a hold covers is read from the
	// store's lines of B's instances (their hellos: checkout-4's says
	// holds_unsupported), which B writes on its own schedule.
	eventually.Within(t, stepTimeout, "A reading B's three instances from the store", func() bool {
		d, err := a.col.Dependency(k)
		return err == nil && len(d.PerInstance) == 4 && d.PerInstance[3].Config.HoldsUnsupported
	})

	const form = `form[data-testid=hold-form] `
	dep := a.url + "/dependency?service=checkout&breaker=payments"
	for _, w := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, fmt.Sprintf("A's dependency page at %d px", w), narrow(w), chromedp.Navigate(dep),
			chromedp.WaitVisible(css(form)), chromedp.ScrollIntoView(css(`[data-testid=holds-partly]`)))
		partly := get(t, ctx, "the note on what cannot be held", chromedp.Text(css(`[data-testid=holds-partly]`)))
		if !strings.HasPrefix(partly, "checkout-4 cannot be held: a sony/gobreaker v2 breaker") {
			t.Errorf("at %d px A's dependency page says %q, want that checkout-4 (on B) cannot be held", w, partly)
		}
		if off := get(t, ctx, "the note's box", chromedp.Evaluate[string](offScreen(`[data-testid=holds-partly]`))); off != "" {
			t.Errorf("at %d px the note on what cannot be held is cut: %s", w, off)
		}
		if bad := get(t, ctx, "hit test", chromedp.Evaluate[string](notAtOwnCentre(`[data-testid=hold-review]`))); bad != "" {
			t.Errorf("at %d px the hold form's review button is not the element at its centre: %s", w, bad)
		}
		screenshot(t, ctx, fmt.Sprintf("fleet-holds-a-form-%d.png", w))
		elementShot(t, ctx, `[data-testid=dep-hold-form]`, fmt.Sprintf("fleet-holds-a-form-panel-%d.png", w))
	}

	run(t, ctx, stepTimeout, "review a hold of checkout/payments on A", narrow(1440),
		chromedp.Click(css(form+`input[name=action][value=force_open]`)),
		chromedp.SetValue(css(form+`[data-testid=hold-ttl]`), "20"),
		chromedp.SendKeys(css(form+`[data-testid=hold-reason]`), "drill the payments fallback on both collectors"),
		chromedp.Click(css(form+`[data-testid=hold-review]`)),
		chromedp.WaitVisible(css(`[data-testid=hold-blast]`)),
	)
	blast := get(t, ctx, "read the blast radius", chromedp.Text(css(`[data-testid=hold-blast]`)))
	for _, want := range []string{
		"reject every call from 3 instances of 1 service (checkout) to payments for 20m0s",
		"Matching now: checkout/checkout-1, checkout/checkout-2, checkout/checkout-3.",
		"Share reached: 3 of 4 live instances with a payments breaker.",
		"Not held (holds not supported): checkout/checkout-4: a sony/gobreaker v2 breaker cannot be held open or closed.",
		// B's part of the dependency has a member that cannot be held: its
		// calls are not counted, and the page says so.
		"(their last report; the calls of 2 instances served by other collectors are not known here).",
	} {
		if !strings.Contains(blast, want) {
			t.Errorf("A's blast radius %q lacks %q", blast, want)
		}
	}
	for _, w := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, fmt.Sprintf("%d px", w), narrow(w))
		g := get(t, ctx, "blast geometry", chromedp.Evaluate[[]float64](blastGeometry))
		bl, br, bt, bb, kl, kr, kt, kb, vw := g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]
		if bl < 0 || br > vw+1 || br-bl < min(500, 0.7*vw) { // .confirm is at most 640 px wide

			t.Errorf("at %d px the blast radius spans %.0f-%.0f of %.0f px", w, bl, br, vw)
		}
		if kl < kr && bl < kr && kl < br && bt < kb && kt < bb {
			t.Errorf("at %d px the confirmation button (%.0f-%.0f, %.0f-%.0f) overlaps the blast radius (%.0f-%.0f, %.0f-%.0f)",
				w, kl, kr, kt, kb, bl, br, bt, bb)
		}
		if kt < bb {
			t.Errorf("at %d px the confirmation button (top %.0f) is not below the blast radius (bottom %.0f)", w, kt, bb)
		}
		if off := get(t, ctx, "blast lines", chromedp.Evaluate[string](offScreen(`[data-testid=hold-blast] li`))); off != "" {
			t.Errorf("at %d px lines of the blast radius are cut: %s", w, off)
		}
		if bad := get(t, ctx, "hit test", chromedp.Evaluate[string](notAtOwnCentre(`[data-testid=hold-confirm-button]`))); bad != "" {
			t.Errorf("at %d px the confirmation button is not the element at its centre: %s", w, bad)
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("at %d px the confirmation scrolls sideways: %s", w, o)
		}
		screenshot(t, ctx, fmt.Sprintf("fleet-holds-a-blast-%d.png", w))
	}

	run(t, ctx, stepTimeout, "confirm on A: its drill report", narrow(1440),
		chromedp.Click(css(`[data-testid=hold-confirm-button]`)),
		chromedp.WaitVisible(css(`[data-testid=report-summary]`)),
	)
	path := get(t, ctx, "the report's address", chromedp.Evaluate[string](`location.pathname`))
	id, ok := strings.CutPrefix(path, "/holds/")
	if !ok {
		t.Fatalf("confirming led to %s, not a drill report", path)
	}
	// B applies the hold to its instances (the bus tells it, or it reads
	// the store); their answers reach the store, which A's report reads.
	covered := []string{"checkout-1", "checkout-2", "checkout-3"}
	eventually.Within(t, stepTimeout, "the three breakers held and their answers in A's report", func() bool {
		r, err := a.col.HoldReport(context.Background(), id)
		if err != nil || len(r.Instances) != len(covered) {
			return false
		}
		for i, in := range r.Instances {
			if in.Instance != covered[i] || in.Status != cbdash.TargetApplied || breakers[in.Instance].State() != breaker.ForcedOpen {
				return false
			}
		}
		return true
	})
	if s := breakers["checkout-4"].State(); s != breaker.Closed {
		t.Errorf("checkout-4, which cannot be held, is %v, want closed (left alone)", s)
	}
	run(t, ctx, stepTimeout, "reload A's drill report", chromedp.Reload(), chromedp.WaitVisible(css(`[data-testid=report-instances]`)))
	if got, want := get(t, ctx, "instances covered", chromedp.Text(css(`[data-testid=sum-covered]`))),
		"3 instances: checkout/checkout-1, checkout/checkout-2, checkout/checkout-3"; got != want {
		t.Errorf("A's drill report covers %q, want %q", got, want)
	}
	rows := get(t, ctx, "report rows", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=report-instance]")].map(r => r.cells[0].textContent.trim() + " " + r.cells[3].className)`))
	if want := []string{"checkout/checkout-1 ", "checkout/checkout-2 ", "checkout/checkout-3 "}; !slices.Equal(rows, want) {
		t.Errorf("A's drill report's rows (instance, answer's class) %q, want %q: each applied", rows, want)
	}
	screenshot(t, ctx, "fleet-holds-a-report-1440.png")

	run(t, ctx, stepTimeout, "A's holds list", chromedp.Navigate(a.url+"/holds"), chromedp.WaitVisible(css(`[data-hold="`+id+`"]`)))
	if got := get(t, ctx, "coverage", chromedp.Text(css(`[data-hold="`+id+`"] [data-testid=hold-coverage]`))); got != "3 instance breakers: 3 applied" {
		t.Errorf("A's holds list says the hold's coverage is %q, want 3 instance breakers: 3 applied", got)
	}
	screenshot(t, ctx, "fleet-holds-a-list-1440.png")

	run(t, ctx, stepTimeout, "A's dependency page with the hold", chromedp.Navigate(dep), chromedp.WaitVisible(css(`[data-testid=current-holds]`)))
	if got := get(t, ctx, "governs", chromedp.Text(css(`[data-hold="`+id+`"] [data-testid=hold-governs]`))); got != strings.Join(covered, ", ") {
		t.Errorf("on A's dependency page the hold governs %q, want %s (B's two; not checkout-4, which cannot be held)", got, strings.Join(covered, ", "))
	}
	// Each instance breaker the hold forced says who holds it, B's too
	// (from the store's state and the stored hold that governs it).
	held := get(t, ctx, "instances held", chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=instance-row]")].map(r =>
		r.cells[0].textContent.trim() + ": " + (r.querySelector("[data-testid=instance-held]")?.textContent.replace(/\s+/g, " ").trim() ?? "-"))`))
	wantHeld := []string{}
	for i, inst := range []string{"checkout-1", "checkout-2", "checkout-3", "checkout-4"} {
		if i < 3 {
			wantHeld = append(wantHeld, inst+": held open by otto · hold "+id)
		} else {
			wantHeld = append(wantHeld, inst+": -")
		}
	}
	if !slices.Equal(held, wantHeld) {
		t.Errorf("A's instance table says %q, want %q", held, wantHeld)
	}
	screenshot(t, ctx, "fleet-holds-a-dependency-1440.png")
}
