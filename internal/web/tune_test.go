package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/cbdash/cbdash/internal/tune"
)

// checkedGet GETs path with token, wants status, and validates the answer
// against the OpenAPI document; it returns the body.
func checkedGet(t *testing.T, base, token, path string, status int) []byte {
	t.Helper()
	doc := loadOpenAPI(t)
	strict(doc)
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != status {
		t.Fatalf("GET %s: %d %s, want %d", path, res.StatusCode, body, status)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("GET %s: not in the document: %v", path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("GET %s: the response does not match the document: %v\n%.600s", path, err, body)
	}
	return body
}

func TestReplayAPI(t *testing.T) {
	h, token, _ := apiFixture(t, "replay")
	body := checkedGet(t, h.url, token, "/api/v1/breakers/checkout/payments/replay?candidate=failure-rate=20,minimum-calls=5&candidate=window=30s", 200)
	var rep tune.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 || rep.Runs[0].Label != "live" || rep.Runs[2].Label != "window=30s" || rep.Seconds == 0 || len(rep.Notes) == 0 {
		t.Errorf("report %.800s", body)
	}
	sweep := checkedGet(t, h.url, token, "/api/v1/breakers/checkout/payments/replay?grid=failure-rate=20|50,open=5s|30s", 200)
	if err := json.Unmarshal(sweep, &rep); err != nil || len(rep.Runs) != 5 || !strings.Contains(string(sweep), `"pareto":true`) {
		t.Errorf("sweep %v %.800s", err, sweep)
	}
	checkedGet(t, h.url, token, "/api/v1/breakers/checkout/payments/replay?candidate=threshold=20", 400)
	checkedGet(t, h.url, token, "/api/v1/breakers/checkout/payments/replay?from=2020-01-01T00:00:00Z&to=2020-01-03T00:00:00Z", 400)
	checkedGet(t, h.url, token, "/api/v1/breakers/checkout/nope/replay", 404)
}

func TestReviewAPI(t *testing.T) {
	h, token, _ := apiFixture(t, "review")
	var r tune.BreakerReview
	if err := json.Unmarshal(checkedGet(t, h.url, token, "/api/v1/breakers/checkout/payments/review", 200), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Answers) != 7 || r.Service != "checkout" {
		t.Errorf("review %+v", r)
	}
	var all []tune.BreakerReview
	if err := json.Unmarshal(checkedGet(t, h.url, token, "/api/v1/review", 200), &all); err != nil || len(all) != 2 {
		t.Errorf("reviews %v %d", err, len(all))
	}
	checkedGet(t, h.url, token, "/api/v1/breakers/checkout/nope/review", 404)
}
