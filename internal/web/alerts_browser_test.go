package web_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestBrowserAlertEditorCreatesARuleThatFiresAndShowsOnTheOverview: an
// operator creates a rule in the editor, sends a test notification to a
// webhook on loopback, then a real breaker trips: the webhook gets the
// alert, the overview's header counts it live and the alerts page lists
// it with since when.
func TestBrowserAlertEditorCreatesARuleThatFiresAndShowsOnTheOverview(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	hook := newHook(t)
	login(t, ctx, s.url, "otto", s.password)

	run(t, ctx, stepTimeout, "create a rule in the editor",
		chromedp.Navigate(s.url+"/alerts"),
		chromedp.WaitVisible(css(`form[data-testid=rule-form]`)),
		chromedp.WaitVisible(css(`[data-testid=firing-empty]`)),
		chromedp.SendKeys(css(`form[data-testid=rule-form] input[name=name]`), "payments down"),
		chromedp.SendKeys(css(`form[data-testid=rule-form] input[name=service]`), "checkout"),
		chromedp.SendKeys(css(`form[data-testid=rule-form] input[name=breaker]`), "payments"),
		chromedp.SendKeys(css(`form[data-testid=rule-form] input[name=hold]`), "5m"),
		chromedp.SendKeys(css(`form[data-testid=rule-form] input[name=webhook_url]`), hook.URL+"/hooks/secret"),
		chromedp.Click(css(`[data-testid=rule-save]`)),
		chromedp.WaitVisible(css(`[data-testid=alert-notice]`)),
		chromedp.WaitVisible(css(`[data-testid=rule-row]`)),
	)
	if n := get(t, ctx, "notice", chromedp.Text(css(`[data-testid=alert-notice]`))); !strings.Contains(n, "payments down") || !strings.Contains(n, "created") {
		t.Errorf("notice %q", n)
	}
	run(t, ctx, stepTimeout, "send a test notification",
		chromedp.Click(css(`[data-testid=rule-test]`)),
		chromedp.WaitVisible(css(`[data-testid=delivery-row]`)),
	)
	if n := get(t, ctx, "test notice", chromedp.Text(css(`[data-testid=alert-notice]`))); !strings.Contains(n, "delivered (HTTP 200") {
		t.Errorf("test notice %q, want delivered", n)
	}
	if got := hook.events(); len(got) != 1 || got[0] != "test checkout/payments" {
		t.Fatalf("webhook got %q, want one test notification", got)
	}

	run(t, ctx, stepTimeout, "overview with no alert firing",
		chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(css(`article.tile[data-state=closed]`)),
		until(`document.querySelector("[data-testid=fleet-alerts] .n")?.textContent === "0"`),
	)
	b := s.breakers["checkout-1"]
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("payments down") })
	}
	if b.State() != breaker.Open {
		t.Fatalf("breaker is %v after failures", b.State())
	}
	run(t, ctx, 15*time.Second, "the overview counts the alert, live",
		until(`document.querySelector("[data-testid=fleet-alerts] .n")?.textContent === "1"`),
		until(`document.querySelector("[data-testid=fleet-alerts]").classList.contains("c-open")`),
	)
	eventually.True(t, "the webhook gets the alert", func() bool { return len(hook.received()) == 2 })
	if got := hook.events()[1]; got != "firing checkout/payments" {
		t.Errorf("webhook's second message %q, want the firing", got)
	}
	run(t, ctx, 15*time.Second, "the fleet line shows the open instance, live",
		until(`[...document.querySelectorAll("[data-testid=fleet-point]")].some(p => p.dataset.instances === "1")`),
	)
	screenshot(t, ctx, "overview-alert.png")

	run(t, ctx, stepTimeout, "the alerts page lists it with since when",
		chromedp.Click(css(`[data-testid=fleet-alerts]`)),
		chromedp.WaitVisible(css(`[data-testid=firing-row]`)),
	)
	row := get(t, ctx, "firing row", chromedp.Text(css(`[data-testid=firing-row]`)))
	since := get(t, ctx, "since", chromedp.Text(css(`[data-testid=firing-since]`)))
	if !strings.Contains(row, "checkout/payments") || !strings.Contains(row, "payments down") || !strings.HasPrefix(since, s.clock.Now().UTC().Format("2006-01-02")) {
		t.Errorf("firing row %q since %q", row, since)
	}
	if w := get(t, ctx, "webhook cell", chromedp.Text(css(`[data-testid=rule-webhook]`))); strings.Contains(w, "secret") {
		t.Errorf("an operator who is not admin sees the webhook's path: %q", w)
	}
	screenshot(t, ctx, "alerts.png")
	run(t, ctx, stepTimeout, "the rule in the editor",
		chromedp.Click(css(`[data-testid=rule-edit]`)),
		chromedp.WaitVisible(css(`form[data-testid=rule-form][data-editing=true]`)),
	)
	screenshot(t, ctx, "alerts-edit.png")
}

// TestBrowserFleetLineLinksTheTimelineAtThatMoment: a minute of the
// overview's fleet line opens /timeline over the 15 minutes around it.
func TestBrowserFleetLineLinksTheTimelineAtThatMoment(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 2)
	b := s.breakers["checkout-1"]
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("payments down") })
	}
	login(t, ctx, s.url, "otto", s.password)
	run(t, ctx, 15*time.Second, "the fleet line counts the open instance",
		until(`[...document.querySelectorAll("[data-testid=fleet-point]")].some(p => p.dataset.instances === "1")`),
	)
	// The line is swapped in place by the live socket: follow the
	// minute's link as a click would.
	href := get(t, ctx, "the minute's link", chromedp.Evaluate[string](`document.querySelector("[data-testid=fleet-point][data-instances='1']").getAttribute("href")`))
	run(t, ctx, stepTimeout, "its minute opens the timeline",
		chromedp.Navigate(s.url+href),
		chromedp.WaitVisible(css(`[data-testid=lane]`)),
	)
	loc := get(t, ctx, "location", chromedp.Location())
	if !strings.Contains(loc, "/timeline?") || !strings.Contains(loc, "range=15m") || !strings.Contains(loc, "end=") {
		t.Errorf("the minute opened %s, want /timeline over 15m ending then", loc)
	}
}
