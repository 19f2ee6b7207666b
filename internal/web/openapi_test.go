package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Markdown answers (a drill report, an incident's export) are validated
// as plain strings.
func init() { openapi3filter.RegisterBodyDecoder("text/markdown", openapi3filter.PlainBodyDecoder) }

// loadOpenAPI parses and validates the served document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(web.OpenAPI)
	if err != nil {
		t.Fatalf("the OpenAPI document does not parse: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is not valid OpenAPI 3: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValidAndServedWithoutLogin(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	for _, scheme := range []string{"bearerToken", "agentToken", "sessionCookie"} {
		if doc.Components.SecuritySchemes[scheme] == nil {
			t.Errorf("no security scheme %s", scheme)
		}
	}
	h := newHarnessEmpty(t)
	res, err := http.Get(h.url + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || !bytes.Equal(body, web.OpenAPI) {
		t.Fatalf("GET /api/v1/openapi.json: %d %s, %d bytes", res.StatusCode, res.Header.Get("Content-Type"), len(body))
	}
}

// documented reports whether the route is one the document must
// describe: the JSON API, the probes, /metrics and the login form (the
// login limiter's answers).
func documented(method, path string) bool {
	return strings.HasPrefix(path, "/api/") || path == "/healthz" || path == "/readyz" || path == "/metrics" ||
		method == http.MethodPost && path == "/login"
}

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

func TestOpenAPIDescribesEveryRouteAndNoOther(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	h := newHarnessEmpty(t)
	e := echo.New()
	h.srv.Mount(e) // the routes of the real server
	served := map[string]bool{}
	for _, r := range e.Routes() {
		if !documented(r.Method, r.Path) || r.Method == "echo_route_not_found" {
			continue
		}
		p := echoParam.ReplaceAllString(r.Path, "{$1}")
		served[r.Method+" "+p] = true
		item := doc.Paths.Find(p)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is served but not in the OpenAPI document", r.Method, p)
		}
	}
	for p, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+p] {
				t.Errorf("%s %s is in the OpenAPI document but the server has no such route", method, p)
			}
		}
	}
	if len(served) < 30 {
		t.Fatalf("only %d routes seen: %v", len(served), served)
	}
}

// apiCall is one request of TestOpenAPIResponsesMatchTheDocument.
type apiCall struct {
	method, path string
	body         string
	status       int
}

// strict makes every documented object schema of doc refuse properties
// it does not list (additionalProperties: false; allOf compositions are
// merged into one object first, since each of their parts would refuse
// the others' properties), so a field the server sends that the
// document lacks fails the response validation.
func strict(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		v := ref.Value
		seen[v] = true
		if len(v.AllOf) > 0 {
			merged := *v
			merged.AllOf = nil
			merged.Type = &openapi3.Types{openapi3.TypeObject}
			merged.Properties = openapi3.Schemas{}
			for _, part := range v.AllOf {
				for name, p := range part.Value.Properties {
					merged.Properties[name] = p
				}
				merged.Required = append(merged.Required, part.Value.Required...)
				merged.Nullable = merged.Nullable || part.Value.Nullable
			}
			*v = merged
		}
		if v.Type.Is(openapi3.TypeObject) && len(v.Properties) > 0 && v.AdditionalProperties.Has == nil && v.AdditionalProperties.Schema == nil {
			no := false
			v.AdditionalProperties.Has = &no
		}
		for _, p := range v.Properties {
			walk(p)
		}
		walk(v.Items)
		walk(v.AdditionalProperties.Schema)
		for _, list := range []openapi3.SchemaRefs{v.OneOf, v.AnyOf} {
			for _, p := range list {
				walk(p)
			}
		}
	}
	for _, ref := range doc.Components.Schemas {
		walk(ref)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, res := range op.Responses.Map() {
				for _, mt := range res.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}

func TestOpenAPIResponsesMatchTheDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	strict(doc)
	doc.Servers = nil // "/" is relative to wherever the document came from; the router matches any host without
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	h, token, inc := apiFixture(t, "openapi")
	ctx := context.Background()

	do := func(c apiCall) []byte {
		t.Helper()
		req, _ := http.NewRequest(c.method, h.url+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+token)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != c.status {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, res.StatusCode, body, c.status)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("%s %s: not in the document: %v", c.method, c.path, err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
			Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(body)),
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
			t.Errorf("%s %s: the response does not match the document: %v\n%.600s", c.method, c.path, err, body)
		}
		return body
	}

	for _, c := range []apiCall{
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/api/v1/services", "", 200},
		{"GET", "/api/v1/dependencies", "", 200},
		{"GET", "/api/v1/dependencies?service=checkout", "", 200},
		{"GET", "/api/v1/breakers", "", 200},
		{"GET", "/api/v1/breakers?members=all", "", 200},
		{"GET", "/api/v1/breakers?members=none&service=checkout", "", 200},
		{"GET", "/api/v1/breakers?members=some", "", 400},
		{"GET", "/api/v1/breakers/checkout/payments", "", 200},
		{"GET", "/api/v1/breakers/checkout/payments?limit=2", "", 200},
		{"GET", "/api/v1/breakers/checkout/nope", "", 404},
		{"GET", "/api/v1/breakers/checkout/payments/history?resolution=second", "", 200},
		{"GET", "/api/v1/breakers/checkout/payments/history?resolution=week", "", 400},
		{"GET", "/api/v1/breakers/checkout/payments/gaps", "", 200},
		{"GET", "/api/v1/transitions?service=checkout", "", 200},
		{"GET", "/api/v1/transitions?limit=-1", "", 400},
		{"GET", "/api/v1/incidents", "", 200},
		{"GET", fmt.Sprintf("/api/v1/incidents/%d", inc), "", 200},
		{"GET", "/api/v1/incidents/999", "", 404},
		{"POST", fmt.Sprintf("/api/v1/incidents/%d/notes", inc), `{"text":"looking"}`, 201},
		{"GET", fmt.Sprintf("/api/v1/incidents/%d/export.json", inc), "", 200},
		{"GET", "/api/v1/breakers/checkout/payments?limit=2&offset=1", "", 200},
		{"GET", "/api/v1/alerts/rules", "", 200},
		{"GET", "/api/v1/alerts/firing", "", 200},
		{"GET", "/api/v1/alerts/deliveries", "", 200},
		{"GET", "/api/v1/holds?live=1", "", 200},
	} {
		do(c)
	}

	var cmd cbdash.Command
	issued := do(apiCall{"POST", "/api/v1/commands", `{"service":"checkout","breaker":"search","action":"reset","reason":"openapi"}`, 201})
	if err := json.Unmarshal(issued, &cmd); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(issued, []byte("0001-01-01")) {
		t.Errorf("a reset with pending targets has zero times (a pending target's at, a reset's expires_at are absent): %s", issued)
	}
	if cmd.Actor != "otto" {
		t.Errorf("the command's actor is %q, want the token's user otto", cmd.Actor)
	}
	do(apiCall{"GET", "/api/v1/commands?service=checkout", "", 200})
	do(apiCall{"GET", "/api/v1/commands/" + url.PathEscape(cmd.ID), "", 200})
	do(apiCall{"POST", "/api/v1/commands", `{"service":"checkout","breaker":"search","action":"force_open"}`, 400})

	var rule struct{ ID int64 }
	ruleBody := `{"name":"payments open","service":"checkout","breaker":"payments","kind":"open","hold":"1m","webhook_url":"http://127.0.0.1:9/hook"}`
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/alerts/rules", ruleBody, 201}), &rule); err != nil {
		t.Fatal(err)
	}
	ruleURL := fmt.Sprintf("/api/v1/alerts/rules/%d", rule.ID)
	do(apiCall{"GET", ruleURL, "", 200})
	do(apiCall{"PUT", ruleURL, strings.Replace(ruleBody, `"1m"`, `"2m"`, 1), 200})
	do(apiCall{"POST", "/api/v1/alerts/rules", `{"service":"checkout","kind":"sometimes","webhook_url":"http://127.0.0.1:9/hook"}`, 400})
	do(apiCall{"DELETE", ruleURL, "", 204})
	do(apiCall{"GET", ruleURL, "", 404})

	var sl cbdash.Silence
	silence := `{"matchers":{"service":"checkout","breaker":"payments"},"reason":"openapi drill","for":"1h"}`
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/alerts/silences", silence, 201}), &sl); err != nil {
		t.Fatal(err)
	}
	if sl.CreatedBy != "otto" || sl.Reason != "openapi drill" {
		t.Errorf("silence %+v, want created by the token's user otto with its reason", sl)
	}
	do(apiCall{"GET", "/api/v1/alerts/silences", "", 200})
	do(apiCall{"POST", "/api/v1/alerts/silences", `{"matchers":{},"reason":"everything","for":"1h"}`, 400})
	do(apiCall{"DELETE", fmt.Sprintf("/api/v1/alerts/silences/%d", sl.ID), "", 204})
	do(apiCall{"DELETE", "/api/v1/alerts/silences/999", "", 404})
	do(apiCall{"GET", "/api/v1/alerts/silences?all=true", "", 200})
	do(apiCall{"POST", "/api/v1/alerts/acks", `{"rule_id":999,"subject":"checkout/payments"}`, 404})
	do(apiCall{"POST", "/api/v1/alerts/acks", `{"subject":"checkout/payments"}`, 400})

	hold := `{"selector":{"service":"*","breaker":"payments"},"action":"force_open","ttl":"10m","reason":"openapi drill","actor":"mallory"}`
	do(apiCall{"POST", "/api/v1/holds/plan", hold, 200})
	do(apiCall{"POST", "/api/v1/holds/plan", `{"selector":{"service":"*"},"action":"force_open","ttl":"10m","reason":"x"}`, 400})
	var h1 cbdash.HoldRecord
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/holds", hold, 201}), &h1); err != nil {
		t.Fatal(err)
	}
	if h1.Actor != "otto" {
		t.Errorf("the hold's actor is %q, want otto (the body's actor is ignored)", h1.Actor)
	}
	do(apiCall{"GET", "/api/v1/holds", "", 200})
	do(apiCall{"GET", "/api/v1/holds/" + h1.ID, "", 200})
	do(apiCall{"GET", "/api/v1/holds/" + h1.ID + "/report", "", 200})
	do(apiCall{"GET", "/api/v1/holds/" + h1.ID + "/report.md", "", 200})
	do(apiCall{"POST", "/api/v1/holds/" + h1.ID + "/release", `{}`, 400})
	var rel cbdash.HoldRecord
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/holds/" + h1.ID + "/release", `{"reason":"drill over"}`, 200}), &rel); err != nil {
		t.Fatal(err)
	}
	if rel.ReleasedBy != "otto" {
		t.Errorf("released by %q, want otto", rel.ReleasedBy)
	}

	var sc cbdash.DrillSchedule
	schedule := `{"selector":{"service":"*","breaker":"payments"},"action":"force_open","ttl":"10m","reason":"weekly drill",` +
		`"stop_if":["fallback-failure-rate>20%"],"steps":[{"share":50,"for":60000000000},{"share":100,"for":540000000000}],"rule":"every tue 10:00"}`
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/schedules", schedule, 201}), &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Actor != "otto" || sc.NextRun.IsZero() {
		t.Errorf("schedule %+v, want otto's with a next run", sc)
	}
	do(apiCall{"POST", "/api/v1/schedules", strings.Replace(schedule, "every tue", "every someday", 1), 400})
	do(apiCall{"POST", "/api/v1/schedules", strings.Replace(schedule, "force_open", "force_closed", 1), 400})
	do(apiCall{"GET", "/api/v1/schedules", "", 200})
	do(apiCall{"GET", "/api/v1/schedules/" + sc.ID, "", 200})
	do(apiCall{"GET", "/api/v1/schedules/nope", "", 404})
	do(apiCall{"DELETE", "/api/v1/schedules/" + sc.ID, "", 400})
	do(apiCall{"DELETE", "/api/v1/schedules/" + sc.ID + "?reason=season+over", "", 200})
	do(apiCall{"DELETE", "/api/v1/schedules/" + sc.ID + "?reason=again", "", 409})
	do(apiCall{"GET", "/api/v1/schedules?deleted=true", "", 200})
}

func TestOpenAPIOperationsHaveUniqueIDs(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	seen := map[string]string{}
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + p
			switch {
			case op.OperationID == "":
				t.Errorf("%s has no operationId", where)
			case seen[op.OperationID] != "":
				t.Errorf("%s and %s share the operationId %q", where, seen[op.OperationID], op.OperationID)
			}
			seen[op.OperationID] = where
		}
	}
	if len(doc.Servers) == 0 {
		t.Error("the document has no servers (generators and linters need one)")
	}
}

// TestOpenAPIEnumsAreTheGoConstants compares the document's enums with
// the constants the server sends.
func TestOpenAPIEnumsAreTheGoConstants(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	states := []string{protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed}
	actions := []string{protocol.ActionForceOpen, protocol.ActionForceClosed, protocol.ActionRelease, protocol.ActionReset}
	holdActions := []string{protocol.ActionForceOpen, protocol.ActionForceClosed}
	kinds := []string{cbdash.AlertOpen, cbdash.AlertHalfOpenLong, cbdash.AlertHeadroom, cbdash.AlertStale, cbdash.AlertDrillStopped, cbdash.AlertFallbackUnexercised}
	formats := []string{cbdash.FormatJSON, cbdash.FormatSlack, cbdash.FormatPagerDuty}
	causes := []string{protocol.CauseFailureRate, protocol.CauseSlowCallRate, protocol.CauseOpenElapsed, protocol.CauseProbeFailed,
		protocol.CauseProbesSucceeded, protocol.CauseCommand, protocol.CauseExpired, protocol.CauseLibraryRule, protocol.CauseAgentCommand,
		protocol.CauseSampled, protocol.CauseQuorum, "unknown", ""} // unknown: sdk/agent's kind for a cause it was not told; "": an incident's unknown first cause
	for _, c := range []struct {
		schema, prop string
		want         []string
	}{
		{"Cause", "kind", causes},
		{"Cause", "action", actions},
		{"InstanceBreaker", "state", states},
		{"Window", "state", states},
		{"DependencySummary", "state", append(slices.Clone(states), "")},
		{"Transition", "from", states},
		{"Transition", "to", states},
		{"AlertRule", "kind", kinds},
		{"AlertRuleRequest", "kind", kinds},
		{"FiringAlert", "kind", kinds},
		{"AlertRule", "format", formats},
		{"AlertRuleRequest", "format", append(slices.Clone(formats), "")},
		{"HoldRecord", "action", holdActions},
		{"HoldRequest", "action", holdActions},
		{"HoldPlan", "action", holdActions},
		{"HoldReport", "result", []string{cbdash.DrillOngoing, cbdash.DrillStopped, cbdash.DrillReleased, cbdash.DrillPassed}},
		{"Hold", "action", holdActions},
		{"Command", "action", append(slices.Clone(actions), protocol.ActionDeferProbes)}, // the probe rotation's, never requested
		{"CommandRequest", "action", actions},
		{"CommandTarget", "status", []string{cbdash.TargetPending, cbdash.TargetApplied, cbdash.TargetFailed, cbdash.TargetExpired}},
	} {
		s := doc.Components.Schemas[c.schema]
		if s == nil || s.Value.Properties[c.prop] == nil {
			t.Errorf("%s.%s is not in the document", c.schema, c.prop)
			continue
		}
		var got []string
		for _, v := range s.Value.Properties[c.prop].Value.Enum {
			got = append(got, fmt.Sprint(v))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s.%s enum %q, want the constants %q", c.schema, c.prop, got, want)
		}
	}
}

// TestOpenAPIOneShapePerStatus holds every operation of the document to
// what a generated typed client needs: each status answers one schema
// per media type, never a union (anyOf or oneOf of shapes the client
// would have to tell apart and cast), and an operation answers one
// success body: at most one 2xx status and media type carries content.
// A shape chosen by a query parameter belongs on a path of its own (GET
// /api/v1/dependencies beside GET /api/v1/breakers, POST
// /api/v1/holds/plan beside POST /api/v1/holds, .../report.md beside
// .../report).
func TestOpenAPIOneShapePerStatus(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	ops := 0
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			where := method + " " + p
			var bodies []string
			for status, res := range op.Responses.Map() {
				if res.Value == nil {
					t.Errorf("%s %s: an unresolved response", where, status)
					continue
				}
				for mt, media := range res.Value.Content {
					switch s := media.Schema; {
					case s == nil || s.Value == nil:
						t.Errorf("%s %s %s: no schema", where, status, mt)
					case len(s.Value.AnyOf) > 0 || len(s.Value.OneOf) > 0:
						t.Errorf("%s %s %s: a union of %d shapes (anyOf/oneOf), want one schema", where, status, mt, len(s.Value.AnyOf)+len(s.Value.OneOf))
					}
					if strings.HasPrefix(status, "2") {
						bodies = append(bodies, status+" "+mt)
					}
				}
			}
			if len(bodies) > 1 {
				slices.Sort(bodies)
				t.Errorf("%s answers %d success bodies %q, want one (a generated client's result would be their union)", where, len(bodies), bodies)
			}
		}
	}
	if ops < 30 {
		t.Fatalf("only %d operations in the document", ops)
	}
}

// apiFixture starts a harness with checkout/payments (3 instances, 1
// open), checkout/search and the extra dependencies, an API token of
// operator otto named name, and an open incident of checkout/payments,
// for the tests that call every operation of the JSON API.
func apiFixture(t *testing.T, name string, extra ...fleet) (*harness, string, int64) {
	t.Helper()
	h := newHarness(t, web.Config{}, append([]fleet{dep("checkout", "payments", 3, 1), dep("checkout", "search", 2, 0)}, extra...)...)
	ctx := context.Background()
	otto, _, err := h.st.UserByName(ctx, "otto")
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.st.CreateUserToken(ctx, otto.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	inc, err := h.st.CreateIncident(ctx, cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Start: h.clock.Now().Add(-time.Minute), Open: true, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1"})
	if err != nil {
		t.Fatal(err)
	}
	return h, token, inc
}
