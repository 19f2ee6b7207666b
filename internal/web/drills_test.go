package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// A drill on a dependency with an open incident is refused with the
// reason: the dry run (POST /api/v1/holds/plan) lists it, POST
// /api/v1/holds answers 409 with it, and the dependency page's
// confirmation says it with no button to confirm. Its stop conditions
// come back with the plan.
func TestPreflightRefusesADrillDuringAnIncidentByTheAPIAndThePage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("api", "db", 1, 0))
	id, err := h.st.CreateIncident(t.Context(), cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		Start: h.clock.Now(), Open: true, Instances: []string{"api-1"}, Opens: 1, FirstInstance: "api-1"})
	if err != nil {
		t.Fatal(err)
	}
	otto, _, _ := h.st.UserByName(t.Context(), "otto")
	token, err := h.st.CreateUserToken(t.Context(), otto.ID, "drills")
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	want := "incident " + itoa64(id) + " is open on api/db since "
	drill := `{"selector":{"service":"api","breaker":"db"},"action":"force_open","ttl":"10m","reason":"drill","stop_if":["fallback-failure-rate>20%","error-rate>30% for 10s"]}`
	code, body := call("POST", "/api/v1/holds/plan", drill)
	var plan cbdash.HoldPlan
	if code != http.StatusOK || json.Unmarshal([]byte(body), &plan) != nil || len(plan.Refused) != 1 || !strings.HasPrefix(plan.Refused[0], want) {
		t.Fatalf("plan: %d %s, want refused: %s", code, body, want)
	}
	if len(plan.Stops) != 2 || plan.Stops[1].String() != "error-rate>30% for 10s" {
		t.Errorf("plan stops %v", plan.Stops)
	}
	if code, body = call("POST", "/api/v1/holds", drill); code != http.StatusConflict || !strings.Contains(body, want) || !strings.Contains(body, "a hold, not a drill") {
		t.Fatalf("create: %d %s, want 409: %s", code, body, want)
	}

	form := url.Values{"from": {"api"}, "service": {"api"}, "breaker": {"db"}, "action": {"force_open"}, "ttl": {"10"},
		"reason": {"drill"}, "stop_if": {"fallback-failure-rate>20%"}}
	res := h.login("otto").postForm("/holds/confirm", form)
	if res.status != http.StatusConflict {
		t.Errorf("the page's dry run: %d, want 409", res.status)
	}
	mustContain(t, "the refusal on the page", res.body, `data-testid="hold-error"`, "Pre-flight refuses this drill: "+want,
		"wait for it to end (the Incidents page, or cbdash incidents); or, to hold it anyway (a hold, not a drill), force it open without stop conditions")
	if strings.Contains(res.body, "hold-confirm-button") {
		t.Error("a refused drill can still be confirmed")
	}
	if hs, _ := h.st.Holds(t.Context(), cbdash.HoldQuery{}); len(hs) != 0 {
		t.Fatalf("a refused drill created %v", hs)
	}
}

// A dependency's fallback freshness: before any fallback served a
// rejected call, the tile and the dependency page say it never ran and
// the overview counts it; once forced-open reports count fallbacks, the
// API's dependency has its run (when, served, failed) and the page says
// how long ago and how well.
func TestFallbackFreshnessOnTheAPIThePageAndTheOverview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("api", "db", 1, 0))
	vera := h.login("vera")
	page := "/dependency?" + url.Values{"service": {"api"}, "breaker": {"db"}}.Encode()
	mustContain(t, "the dependency page before", vera.get(page).body, "fallback never ran (since the collector started)")
	mustContain(t, "the overview before", vera.get("/").body, `data-testid="fleet-fallback-never"`, "fallbacks never ran")

	now := h.clock.Now()
	h.ingest("api", "api-1", protocol.Batch{Windows: []protocol.Window{{Breaker: "db", Start: now.Add(-time.Second).UnixMilli(),
		Millis: 1000, State: protocol.StateForcedOpen, Counts: protocol.Counts{RejectedForced: 20, FallbackSuccess: 15, FallbackFailure: 5}}}})
	var d cbdash.Dependency
	eventually.True(t, "the fallback run in the API", func() bool {
		res := vera.get("/api/v1/breakers/api/db")
		return res.status == http.StatusOK && json.Unmarshal([]byte(res.body), &d) == nil && d.Fallback != nil
	})
	if d.Fallback.Served != 15 || d.Fallback.Failed != 5 || d.Fallback.SuccessShare != 75 || !d.Fallback.LastServed.Equal(now.Truncate(time.Millisecond)) {
		t.Errorf("fallback %+v", d.Fallback)
	}
	mustContain(t, "the dependency page after", vera.get(page).body, "fallback last ran", ": 75 % served (15 of 20)")
}
