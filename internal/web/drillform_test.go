package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
)

// The dependency page's operator panel takes a drill's fields through
// the fleet-wide hold's handling: a force open with a stop condition is
// refused by pre-flight during an incident (409, the reason, no button),
// a drill that is not a force open, an unreadable schedule and a one-off
// time in the past are refused with what is wrong, and a weekly one
// confirmed is stored as a schedule of this service's instances.
func TestOperatorPanelDrillsGoThroughTheHoldForm(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("api", "db", 2, 0))
	otto := h.login("otto")
	form := func(mod func(url.Values)) url.Values {
		v := url.Values{"service": {"api"}, "breaker": {"db"}, "action": {"force_open"}, "scope": {"all"}, "share": {"50"},
			"ttl": {"10"}, "reason": {"drill"}, "stop_if": {"fallback-failure-rate>20%"}, "when": {"now"}}
		mod(v)
		return v
	}
	for name, c := range map[string]struct {
		mod  func(url.Values)
		want string
	}{
		"release with a stop condition": {func(v url.Values) { v.Set("action", "release") }, "for a force open (a drill), not release"},
		"a weekly drill without a time": {func(v url.Values) { v.Set("when", "weekly"); v.Set("day", "tue") }, "day and time (UTC) are required"},
		"a once drill in the past": {func(v url.Values) {
			v.Set("when", "once")
			v.Set("at", h.clock.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04"))
		}, "is not in the future"},
		"a bad stop condition": {func(v url.Values) { v.Set("stop_if", "fallback-failure-rate>") }, "stop condition"},
	} {
		res := otto.postForm("/dependency/confirm", form(c.mod))
		if res.status != http.StatusBadRequest || !strings.Contains(res.body, c.want) || strings.Contains(res.body, "hold-confirm-button") {
			t.Errorf("%s: %d, want 400 saying %q; body %.300s", name, res.status, c.want, res.body)
		}
	}

	res := otto.postForm("/dependency/confirm", form(func(v url.Values) { v.Set("scope", "share"); v.Set("share", "50") }))
	mustContain(t, "a drill now, half the instances", res.body, `data-testid="hold-blast"`, "It stops by itself, everywhere at once, if: fallback-failure-rate&gt;20%",
		`name="share" value="50"`, `name="instances" value=""`, `action="/holds"`)

	res = otto.postForm("/dependency/confirm", form(func(v url.Values) { v.Set("when", "weekly"); v.Set("day", "thu"); v.Set("time", "06:30") }))
	mustContain(t, "a weekly drill", res.body, "Schedule a drill: force open api/db", "Runs every thu 06:30 (UTC)", `action="/holds/schedule"`)
	fields := url.Values{}
	for _, n := range []string{"from", "service", "breaker", "action", "labels", "instances", "share", "ttl", "reason", "stop_if", "drop_stop_if",
		"drop_reason", "steps", "when", "at", "day", "time"} {
		fields.Set(n, hiddenValue(res.body, n))
	}
	if res = otto.postForm("/holds/schedule", fields); res.status != http.StatusSeeOther && res.status != http.StatusFound && res.status != http.StatusOK {
		t.Fatalf("confirm the schedule: %d %.300s", res.status, res.body)
	}
	ds, err := h.col.Schedules(t.Context(), false)
	if err != nil || len(ds) != 1 || ds[0].Rule.String() != "every thu 06:30" || ds[0].Selector.String() != "api/db" || ds[0].TTL != 10*time.Minute ||
		len(ds[0].StopIf) != 1 || ds[0].Actor != "otto" {
		t.Fatalf("schedules %+v (%v)", ds, err)
	}

	if _, err := h.st.CreateIncident(t.Context(), cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		Start: h.clock.Now(), Open: true, Instances: []string{"api-1"}, Opens: 1, FirstInstance: "api-1"}); err != nil {
		t.Fatal(err)
	}
	res = otto.postForm("/dependency/confirm", form(func(url.Values) {}))
	if res.status != http.StatusConflict || !strings.Contains(res.body, "Pre-flight refuses this drill: incident ") || strings.Contains(res.body, "hold-confirm-button") {
		t.Errorf("a drill during an incident: %d %.400s, want 409 and the reason", res.status, res.body)
	}
}

// hiddenValue is the value of the hidden input named name in a page.
func hiddenValue(body, name string) string {
	_, rest, ok := strings.Cut(body, `<input type="hidden" name="`+name+`" value="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return strings.NewReplacer("&gt;", ">", "&lt;", "<", "&amp;", "&", "&#34;", `"`, "&#39;", "'").Replace(v)
}

// The alerts page's editor offers the kind fallback_unexercised, takes
// its For in whole days ("45d") and lists the rule with it; left empty,
// the rule says the 30 days it defaults to.
func TestAlertsPageTakesAFallbackNotExercisedRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	rcv := newHook(t)
	otto := h.login("otto")
	mustContain(t, "the editor", otto.get("/alerts").body, `<option value="fallback_unexercised"`)
	for _, c := range []struct{ name, forText, want string }{{"pricing fallback", "45d", "not exercised for 45d"}, {"any fallback", "", "not exercised for 30d"}} {
		res := otto.postForm("/alerts/rules", url.Values{"name": {c.name}, "service": {"checkout"}, "kind": {"fallback_unexercised"},
			"for": {c.forText}, "webhook_url": {rcv.URL}, "format": {"json"}})
		if res.status != http.StatusSeeOther {
			t.Fatalf("create %s: %d %.300s", c.name, res.status, res.body)
		}
		mustContain(t, "the rule list", otto.get("/alerts").body, c.name, c.want)
	}
	rules, err := h.st.AlertRules(t.Context())
	if err != nil || len(rules) != 2 || rules[0].For != 45*24*time.Hour || rules[0].Kind != cbdash.AlertFallbackUnexercised || rules[1].For != 0 {
		t.Fatalf("rules %+v (%v)", rules, err)
	}
	mustContain(t, "the edit form", otto.get("/alerts?edit="+itoa64(rules[0].ID)).body, `name="for" value="45d"`)
}
