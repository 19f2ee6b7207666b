package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
)

// TestAlertsPageSilencesAndAcknowledges: on the alerts page an operator
// acknowledges a firing alert and silences its breaker (a viewer may do
// neither); the firing row says it is acknowledged and silenced, the
// silences list shows who made it, the overview counts it, and ending it
// from the page removes it (it stays in the store with who ended it).
func TestAlertsPageSilencesAndAcknowledges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	rcv := newHook(t)
	otto, vera := h.login("otto"), h.login("vera")
	ctx := context.Background()
	if res := otto.postForm("/alerts/rules", url.Values{"name": {"payments down"}, "service": {"checkout"}, "breaker": {"payments"},
		"kind": {"open"}, "webhook_url": {rcv.URL}, "format": {"json"}}); res.status != http.StatusSeeOther {
		t.Fatalf("create the rule: %d %s", res.status, res.body)
	}
	h.report("checkout", "payments", "checkout-1", "open")
	eventually.True(t, "the alert delivered", func() bool {
		h.tick()
		return len(rcv.received()) == 1
	})
	ack := url.Values{"rule_id": {"1"}, "subject": {"checkout/payments"}}
	if res := vera.postForm("/alerts/acks", ack); res.status != http.StatusForbidden {
		t.Errorf("a viewer acknowledged: %d", res.status)
	}
	if !strings.Contains(otto.get("/alerts").body, `data-testid="firing-ack"`) {
		t.Error("the firing row offers an operator no acknowledge button")
	}
	if res := otto.postForm("/alerts/acks", ack); res.status != http.StatusSeeOther {
		t.Fatalf("acknowledge: %d %s", res.status, res.body)
	}
	silence := url.Values{"service": {"checkout"}, "breaker": {"payments"}, "for": {"2h"}, "reason": {"payments failover drill"}}
	if res := vera.postForm("/alerts/silences", silence); res.status != http.StatusForbidden {
		t.Errorf("a viewer silenced: %d", res.status)
	}
	if res := otto.postForm("/alerts/silences", url.Values{"for": {"2h"}, "reason": {"everything"}}); res.status != http.StatusBadRequest {
		t.Errorf("a silence of everything: %d, want 400", res.status)
	}
	if res := otto.postForm("/alerts/silences", silence); res.status != http.StatusSeeOther {
		t.Fatalf("silence: %d %s", res.status, res.body)
	}
	page := vera.get("/alerts").body
	for _, want := range []string{"silenced by silence 1 until", "acknowledged by otto at", `data-testid="silence-matches">service=checkout breaker=payments`,
		"payments failover drill"} {
		if !strings.Contains(page, want) {
			t.Errorf("the alerts page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, `data-testid="silence-expire"`) || strings.Contains(page, `data-testid="silence-form"`) {
		t.Error("a viewer is offered to end or create a silence")
	}
	if !strings.Contains(vera.get("/").body, "(1 silenced)") {
		t.Error("the overview does not count the silence")
	}
	if res := otto.postForm("/alerts/silences/1/expire", url.Values{}); res.status != http.StatusSeeOther {
		t.Fatalf("end the silence: %d %s", res.status, res.body)
	}
	if page := vera.get("/alerts").body; !strings.Contains(page, `data-testid="silences-empty"`) || strings.Contains(vera.get("/").body, "silenced)") {
		t.Error("the ended silence is still shown")
	}
	if sl, err := h.st.Silence(ctx, 1); err != nil || sl.ExpiredBy != "otto" || sl.CreatedBy != "otto" {
		t.Errorf("the stored silence = %+v (%v), want created and ended by otto", sl, err)
	}
}

// TestAlertsPageKeepsFlapAndGroupSettings: the rule editor shows and
// saves a rule's flap and group settings, so editing a rule on the page
// does not drop what the API or the CLI set.
func TestAlertsPageKeepsFlapAndGroupSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	rcv := newHook(t)
	otto := h.login("otto")
	form := url.Values{"name": {"db down"}, "service": {"*"}, "breaker": {"db"}, "kind": {"open"}, "webhook_url": {rcv.URL},
		"format": {"json"}, "flap_count": {"3"}, "flap_window": {"5m"}, "group_by": {"breaker"}, "group_wait": {"20s"}}
	if res := otto.postForm("/alerts/rules", form); res.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	edit := otto.get("/alerts?edit=1").body
	for _, want := range []string{`name="flap_count" value="3"`, `name="flap_window" value="5m0s"`, `value="breaker" selected`, `name="group_wait" value="20s"`} {
		if !strings.Contains(edit, want) {
			t.Errorf("the editor lacks %s", want)
		}
	}
	if !strings.Contains(otto.get("/alerts").body, "grouped by breaker (wait 20s, interval 1m0s)") {
		t.Error("the rules table does not say the rule is grouped")
	}
	form.Set("name", "db down everywhere")
	if res := otto.postForm("/alerts/rules/1", form); res.status != http.StatusSeeOther {
		t.Fatalf("update: %d %s", res.status, res.body)
	}
	r, err := h.st.AlertRule(context.Background(), 1)
	if err != nil || r.FlapCount != 3 || r.GroupBy != "breaker" || r.GroupWait.String() != "20s" || r.Name != "db down everywhere" {
		t.Errorf("after the edit: %+v (%v), want the flap and group settings kept", r, err)
	}
}

// TestASilenceByLabelsIsShownOnTheAlertItHoldsBack: a silence that
// matches on labels only (team=pay, the instances' label) is named on the
// firing alert it holds back, on the alerts page and in the firing API,
// and one whose labels do not match is not.
func TestASilenceByLabelsIsShownOnTheAlertItHoldsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	rcv := newHook(t)
	otto := h.login("otto")
	if res := otto.postForm("/alerts/rules", url.Values{"name": {"payments down"}, "service": {"checkout"}, "breaker": {"payments"},
		"kind": {"open"}, "webhook_url": {rcv.URL}, "format": {"json"}}); res.status != http.StatusSeeOther {
		t.Fatalf("create the rule: %d %s", res.status, res.body)
	}
	h.report("checkout", "payments", "checkout-1", "open")
	eventually.True(t, "the alert delivered", func() bool {
		h.tick()
		return len(rcv.received()) == 1
	})
	for _, labels := range []string{"team=search", "team=pay"} {
		if res := otto.postForm("/alerts/silences", url.Values{"labels": {labels}, "for": {"1h"}, "reason": {"quiet " + labels}}); res.status != http.StatusSeeOther {
			t.Fatalf("silence %s: %d %s", labels, res.status, res.body)
		}
	}
	if page := otto.get("/alerts").body; !strings.Contains(page, "silenced by silence 2 until") || strings.Contains(page, "silenced by silence 1 ") {
		t.Errorf("the firing row does not name silence 2 (team=pay) alone:\n%s", page)
	}
	if body := otto.get("/api/v1/alerts/firing").body; !strings.Contains(body, `"silenced":2`) {
		t.Errorf("the firing API does not name silence 2: %s", body)
	}
}
