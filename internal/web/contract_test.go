package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// lastRoundsDocument is the OpenAPI document the server served as API
// 1.0.0 (info.version "1"): internal/web/openapi.json as of commit
// 9f07e8a (issue 27), unchanged through issue 29 (fcbcede), kept as it
// was. Its clients, generated or written by hand, must get what it
// promised from every later 1.x server.
const lastRoundsDocument = "testdata/openapi-1.0.0.json"

// Before issue 15 (at 038ff0c^1, before the OpenAPI document), GET
// /api/v1/breakers answered every dependency with every member ("every
// breaker, worst first" in the README; cbdash.Dependency, whose fields
// below have no omitempty), and GET /api/v1/breakers/{service}/{breaker}
// one dependency with all its members. Issue 15 made the list summaries
// and the members pages of 100, which broke those clients (issue 30).
var (
	dependencyFieldsBeforeIssue15 = []string{"service", "breaker", "state", "by_state", "instances", "stale", "recent",
		"request_rate", "admitted_rate", "rejected_rate", "failure_rate", "slow_call_rate", "headroom", "closeness", "shown",
		"p50", "p99", "p50_ms", "p99_ms", "opens_today", "last_change", "per_instance"}
	memberFieldsBeforeIssue15 = []string{"service", "instance", "breaker", "state", "stale", "last_seen", "last_transition",
		"config", "config_differs", "last", "clock_skew_ms", "shown"}
)

// notReplayed are the operations of the last round's document that
// TestLastRoundsClientsGetWhatTheirDocumentPromised does not replay, and
// where they are held to it.
var notReplayed = map[string]string{
	"agentSession": "the agent protocol cbdash.v1 over a websocket: docs/protocol.md, internal/ingest's and sdk/agent's tests",
}

// contractCall is one request of the last round's document and what its
// answer must hold beyond the document.
type contractCall struct {
	op, method, path, body string
	status                 int
	// successor, when set, is the Link rel="successor-version" of a
	// deprecated form, which must also carry Deprecation.
	successor string
	check     func(t *testing.T, body []byte)
}

// TestLastRoundsClientsGetWhatTheirDocumentPromised replays against a
// real server on loopback a request of every operation of the last
// round's OpenAPI document (lastRoundsDocument), as its clients send
// them, and validates each answer against that document: its status is
// one the document lists for the operation and its body holds every
// field the document requires, of the type it says. Extra fields are
// allowed (1.x only adds). The requests whose answer a later version
// deprecated answer as before, with Deprecation and a Link to their
// successor. And the clients from before issue 15 get per_instance on
// every dependency of GET /api/v1/breakers, and every member of one
// dependency, with every field those answers had.
func TestLastRoundsClientsGetWhatTheirDocumentPromised(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(lastRoundsDocument)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s: %v", lastRoundsDocument, err)
	}
	if doc.Info.Version != "1" {
		t.Fatalf("%s is version %q, want the last round's \"1\"", lastRoundsDocument, doc.Info.Version)
	}
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}

	h, token, inc := apiFixture(t, "last round's client", dep("cart", "payments", 1, 0))
	ctx := context.Background()
	ingest, err := json.Marshal(protocol.IngestRequest{Hello: hello("contract", "contract-1", []string{"db"}),
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: h.clock.Now().UnixMilli(), Windows: []protocol.Window{{
			Breaker: "db", Start: h.clock.Now().Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateClosed,
			Counts: protocol.Counts{Admitted: 10, Successes: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}

	browser := h.client() // its cookies: the login form's CSRF cookie
	replayed := map[string]bool{}
	do := func(c contractCall) []byte {
		t.Helper()
		var req *http.Request
		switch {
		case c.op == "login":
			req, _ = http.NewRequest(c.method, h.url+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		default:
			req, _ = http.NewRequest(c.method, h.url+c.path, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Authorization", "Bearer "+token)
			if c.op == "ingest" {
				req.Header.Set("Authorization", "Bearer "+h.stack.AgentToken)
			}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req = req.WithContext(ctx)
		hc := &http.Client{Jar: browser.hc.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body []byte
		if c.op == "streamEvents" {
			// A stream that does not end: its status and type are the
			// answer (the events are held to the document by
			// TestEventStream*).
			if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				t.Errorf("%s %s: Content-Type %q, want text/event-stream", c.method, c.path, res.Header.Get("Content-Type"))
			}
		} else {
			body, _ = io.ReadAll(res.Body)
		}
		where := c.method + " " + c.path
		if res.StatusCode != c.status {
			t.Fatalf("%s: %d %.300s, want %d", where, res.StatusCode, body, c.status)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("%s: not in the last round's document: %v", where, err)
		}
		if route.Operation.OperationID != c.op {
			t.Fatalf("%s is %s in the last round's document, not %s", where, route.Operation.OperationID, c.op)
		}
		replayed[c.op] = true
		if c.op != "streamEvents" {
			in := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
					Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
				Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(body)),
				Options: &openapi3filter.Options{IncludeResponseStatus: true},
			}
			if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
				t.Errorf("%s: the answer is not what the last round's document promised: %v\n%.600s", where, err, body)
			}
		}
		if c.successor != "" {
			links := strings.Join(res.Header.Values("Link"), ", ")
			if res.Header.Get("Deprecation") != web.DeprecatedSince || !strings.Contains(links, "<"+c.successor+`>; rel="successor-version"`) ||
				!strings.Contains(links, `rel="deprecation"`) {
				t.Errorf("%s, a deprecated form: Deprecation %q, Link %q; want %s and links to %s and the deprecation's document",
					where, res.Header.Get("Deprecation"), links, web.DeprecatedSince, c.successor)
			}
		} else if d := res.Header.Get("Deprecation"); d != "" {
			t.Errorf("%s is not deprecated but answers Deprecation: %s", where, d)
		}
		if c.check != nil {
			c.check(t, body)
		}
		return body
	}

	everyMember := func(t *testing.T, d map[string]any) {
		t.Helper()
		members, ok := d["per_instance"].([]any)
		if !ok {
			t.Fatalf("%v/%v: per_instance is %T %v, want the array of its members", d["service"], d["breaker"], d["per_instance"], d["per_instance"])
		}
		if n := d["instances"].(float64) + d["stale"].(float64); float64(len(members)) != n {
			t.Errorf("%v/%v: %d members in per_instance, want all %v (live and stale)", d["service"], d["breaker"], len(members), n)
		}
		for _, m := range members {
			hasFields(t, fmt.Sprintf("a member of %v/%v", d["service"], d["breaker"]), m, memberFieldsBeforeIssue15)
		}
	}
	listWithMembers := func(want int) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			t.Helper()
			var deps []map[string]any
			if err := json.Unmarshal(body, &deps); err != nil || len(deps) != want {
				t.Fatalf("%d dependencies (%v), want %d: %.300s", len(deps), err, want, body)
			}
			for _, d := range deps {
				hasFields(t, fmt.Sprintf("dependency %v/%v", d["service"], d["breaker"]), d, dependencyFieldsBeforeIssue15)
				everyMember(t, d)
			}
		}
	}
	oneWithMembers := func(t *testing.T, body []byte) {
		t.Helper()
		var d map[string]any
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		hasFields(t, "the dependency", d, dependencyFieldsBeforeIssue15)
		everyMember(t, d)
		if _, ok := d["next"]; ok {
			t.Errorf("every member is answered but the page has a next: %v", d["next"])
		}
	}

	for _, c := range []contractCall{
		{op: "getHealth", method: "GET", path: "/healthz", status: 200},
		{op: "getReadiness", method: "GET", path: "/readyz", status: 200},
		{op: "getMetrics", method: "GET", path: "/metrics", status: 200},
		{op: "getOpenAPI", method: "GET", path: "/api/v1/openapi.json", status: 200},
		{op: "ingest", method: "POST", path: "/api/v1/ingest", body: string(ingest), status: 200},
		{op: "streamEvents", method: "GET", path: "/api/v1/events?kind=transition", status: 200},
		{op: "listServices", method: "GET", path: "/api/v1/services", status: 200},
		// The client of issue 30: the list, with every member.
		{op: "listBreakers", method: "GET", path: "/api/v1/breakers", status: 200, successor: "/api/v1/dependencies", check: listWithMembers(4)},
		{op: "listBreakers", method: "GET", path: "/api/v1/breakers?service=checkout", status: 200, successor: "/api/v1/dependencies", check: listWithMembers(2)},
		{op: "listBreakers", method: "GET", path: "/api/v1/breakers?members=all", status: 200, successor: "/api/v1/dependencies", check: listWithMembers(4)},
		{op: "listBreakers", method: "GET", path: "/api/v1/breakers?members=some", status: 400},
		{op: "getBreaker", method: "GET", path: "/api/v1/breakers/checkout/payments", status: 200, check: oneWithMembers},
		{op: "getBreaker", method: "GET", path: "/api/v1/breakers/checkout/payments?limit=2", status: 200, check: func(t *testing.T, body []byte) {
			var page struct {
				PerInstance []any  `json:"per_instance"`
				Members     int    `json:"members"`
				Next        string `json:"next"`
			}
			if err := json.Unmarshal(body, &page); err != nil || len(page.PerInstance) != 2 || page.Members != 3 || page.Next == "" {
				t.Errorf("a page of 2: %d members of %d, next %q (%v)", len(page.PerInstance), page.Members, page.Next, err)
			}
		}},
		{op: "getBreaker", method: "GET", path: "/api/v1/breakers/checkout/nope", status: 404},
		{op: "getBreakerHistory", method: "GET", path: "/api/v1/breakers/checkout/payments/history?resolution=minute", status: 200},
		{op: "getBreakerGaps", method: "GET", path: "/api/v1/breakers/checkout/payments/gaps", status: 200},
		{op: "listTransitions", method: "GET", path: "/api/v1/transitions?service=checkout&limit=10", status: 200},
		{op: "listIncidents", method: "GET", path: "/api/v1/incidents?open=1", status: 200},
		{op: "getIncident", method: "GET", path: fmt.Sprintf("/api/v1/incidents/%d", inc), status: 200},
		{op: "addIncidentNote", method: "POST", path: fmt.Sprintf("/api/v1/incidents/%d/notes", inc), body: `{"text":"looking"}`, status: 201},
		{op: "exportIncidentMarkdown", method: "GET", path: fmt.Sprintf("/api/v1/incidents/%d/export.md", inc), status: 200},
		{op: "exportIncidentJSON", method: "GET", path: fmt.Sprintf("/api/v1/incidents/%d/export.json", inc), status: 200},
		{op: "listAlertRules", method: "GET", path: "/api/v1/alerts/rules", status: 200},
		{op: "listAlertDeliveries", method: "GET", path: "/api/v1/alerts/deliveries?limit=20", status: 200},
		{op: "listFiringAlerts", method: "GET", path: "/api/v1/alerts/firing", status: 200},
		{op: "listHolds", method: "GET", path: "/api/v1/holds?live=1", status: 200},
	} {
		do(c)
	}

	var cmd struct{ ID string }
	if err := json.Unmarshal(do(contractCall{op: "issueCommand", method: "POST", path: "/api/v1/commands",
		body: `{"service":"checkout","breaker":"search","action":"reset","reason":"last round"}`, status: 201}), &cmd); err != nil {
		t.Fatal(err)
	}
	do(contractCall{op: "listCommands", method: "GET", path: "/api/v1/commands?service=checkout", status: 200})
	do(contractCall{op: "getCommand", method: "GET", path: "/api/v1/commands/" + url.PathEscape(cmd.ID), status: 200})

	var rule struct{ ID int64 }
	ruleBody := `{"name":"payments open","service":"checkout","breaker":"payments","kind":"open","hold":"1m","webhook_url":"http://127.0.0.1:9/hook"}`
	if err := json.Unmarshal(do(contractCall{op: "createAlertRule", method: "POST", path: "/api/v1/alerts/rules", body: ruleBody, status: 201}), &rule); err != nil {
		t.Fatal(err)
	}
	ruleURL := fmt.Sprintf("/api/v1/alerts/rules/%d", rule.ID)
	do(contractCall{op: "getAlertRule", method: "GET", path: ruleURL, status: 200})
	do(contractCall{op: "updateAlertRule", method: "PUT", path: ruleURL, body: strings.Replace(ruleBody, `"1m"`, `"2m"`, 1), status: 200})
	do(contractCall{op: "deleteAlertRule", method: "DELETE", path: ruleURL, status: 204})

	hold := `{"selector":{"service":"*","breaker":"payments"},"action":"force_open","ttl":"10m","reason":"last round's drill"}`
	do(contractCall{op: "createHold", method: "POST", path: "/api/v1/holds?dry_run=1", body: hold, status: 200, successor: "/api/v1/holds/plan",
		check: func(t *testing.T, body []byte) {
			var p cbdash.HoldPlan
			if err := json.Unmarshal(body, &p); err != nil || len(p.Instances) != 4 {
				t.Errorf("the dry run's plan covers %v (%v), want the 4 instances of */payments", p.Instances, err)
			}
			if hs, _ := h.st.Holds(t.Context(), cbdash.HoldQuery{}); len(hs) != 0 {
				t.Errorf("a dry run made holds: %v", hs)
			}
		}})
	var h1 cbdash.HoldRecord
	if err := json.Unmarshal(do(contractCall{op: "createHold", method: "POST", path: "/api/v1/holds", body: hold, status: 201}), &h1); err != nil {
		t.Fatal(err)
	}
	do(contractCall{op: "getHold", method: "GET", path: "/api/v1/holds/" + h1.ID, status: 200})
	do(contractCall{op: "getHoldReport", method: "GET", path: "/api/v1/holds/" + h1.ID + "/report", status: 200})
	do(contractCall{op: "getHoldReport", method: "GET", path: "/api/v1/holds/" + h1.ID + "/report?format=md", status: 200,
		successor: "/api/v1/holds/" + h1.ID + "/report.md", check: func(t *testing.T, body []byte) {
			if !bytes.HasPrefix(body, []byte("# Drill report: force open")) {
				t.Errorf("the Markdown report: %.200s", body)
			}
		}})
	do(contractCall{op: "releaseHold", method: "POST", path: "/api/v1/holds/" + h1.ID + "/release", body: `{"reason":"drill over"}`, status: 200})

	h.addUser("lara", "viewer", "lara-password")
	do(contractCall{op: "login", method: "POST", path: "/login", status: 303,
		body: url.Values{"user": {"lara"}, "password": {"lara-password"}, "next": {"/"}, "_csrf": {browser.csrf()}}.Encode()})

	var missing []string
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !replayed[op.OperationID] && notReplayed[op.OperationID] == "" {
				missing = append(missing, method+" "+p+" ("+op.OperationID+")")
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("operations of the last round's document not replayed (add a request, or say in notReplayed where they are held to it): %q", missing)
	}
}

// hasFields fails t unless v is a JSON object with every field named.
func hasFields(t *testing.T, what string, v any, fields []string) {
	t.Helper()
	obj, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s is %T, want an object", what, v)
		return
	}
	var missing []string
	for _, f := range fields {
		if _, ok := obj[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %q", what, missing)
	}
}
