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
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
)

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

// documented reports whether path is one the document must describe.
func documented(path string) bool {
	return strings.HasPrefix(path, "/api/") || path == "/healthz" || path == "/readyz" || path == "/metrics"
}

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

func TestOpenAPIDescribesEveryRouteAndNoOther(t *testing.T) {
	doc := loadOpenAPI(t)
	h := newHarnessEmpty(t)
	e := echo.New()
	h.srv.Mount(e) // the routes of the real server
	served := map[string]bool{}
	for _, r := range e.Routes() {
		if !documented(r.Path) || r.Method == "echo_route_not_found" {
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

func TestOpenAPIResponsesMatchTheDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 3, 1), dep("checkout", "search", 2, 0))
	ctx := context.Background()
	otto, _, err := h.st.UserByName(ctx, "otto")
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.st.CreateUserToken(ctx, otto.ID, "openapi")
	if err != nil {
		t.Fatal(err)
	}
	inc, err := h.st.CreateIncident(ctx, cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Start: h.clock.Now().Add(-time.Minute), Open: true, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1"})
	if err != nil {
		t.Fatal(err)
	}

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
		{"GET", "/api/v1/breakers", "", 200},
		{"GET", "/api/v1/breakers?members=all", "", 200},
		{"GET", "/api/v1/breakers?members=some", "", 400},
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
		{"GET", "/api/v1/alerts/rules", "", 200},
		{"GET", "/api/v1/alerts/firing", "", 200},
		{"GET", "/api/v1/alerts/deliveries", "", 200},
		{"GET", "/api/v1/holds?live=1", "", 200},
	} {
		do(c)
	}

	var cmd cbdash.Command
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/commands", `{"service":"checkout","breaker":"search","action":"reset","reason":"openapi"}`, 201}), &cmd); err != nil {
		t.Fatal(err)
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

	hold := `{"selector":{"service":"*","breaker":"payments"},"action":"force_open","ttl":"10m","reason":"openapi drill","actor":"mallory"}`
	do(apiCall{"POST", "/api/v1/holds?dry_run=1", hold, 200})
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
	do(apiCall{"POST", "/api/v1/holds/" + h1.ID + "/release", `{}`, 400})
	var rel cbdash.HoldRecord
	if err := json.Unmarshal(do(apiCall{"POST", "/api/v1/holds/" + h1.ID + "/release", `{"reason":"drill over"}`, 200}), &rel); err != nil {
		t.Fatal(err)
	}
	if rel.ReleasedBy != "otto" {
		t.Errorf("released by %q, want otto", rel.ReleasedBy)
	}
}
