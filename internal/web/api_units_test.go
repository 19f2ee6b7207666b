package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAPIDurationsInMillisecondsBesideTheDeprecatedNanoseconds: every
// answer that has a duration in nanoseconds (a point's width, a command's
// and a hold's ttl, an incident's duration and time to first open) has it
// in milliseconds too, under the name with _ms, and the document marks
// the old fields deprecated, with p50/p99 beside p50_ms/p99_ms and a
// stored transition's Unix ms "at" beside its RFC 3339 "at_time".
func TestAPIDurationsInMillisecondsBesideTheDeprecatedNanoseconds(t *testing.T) {
	t.Parallel()
	h, token, inc := apiFixture(t, "units")
	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if m, ok := v.(map[string]any); ok {
			return m
		}
		return map[string]any{"list": v}
	}
	same := func(what string, obj map[string]any, ns, ms string) {
		t.Helper()
		n, ok1 := obj[ns].(float64)
		m, ok2 := obj[ms].(float64)
		if !ok1 || !ok2 || int64(n)/1e6 != int64(m) {
			t.Errorf("%s: %s=%v, %s=%v: want both, the second in milliseconds", what, ns, obj[ns], ms, obj[ms])
		}
	}
	hold := call("POST", "/api/v1/holds", `{"selector":{"service":"checkout","breaker":"payments"},"action":"force_open","ttl":"10m","reason":"units"}`)
	same("a hold", hold, "ttl", "ttl_ms")
	if hold["ttl_ms"] != float64(600000) {
		t.Errorf("a 10m hold's ttl_ms is %v", hold["ttl_ms"])
	}
	cmds := call("GET", "/api/v1/commands?service=checkout", "")["list"].([]any)
	if len(cmds) == 0 {
		t.Fatal("no command")
	}
	same("a command", cmds[0].(map[string]any), "ttl", "ttl_ms")
	hist := call("GET", "/api/v1/breakers/checkout/payments/history?resolution=second", "")
	pts, _ := hist["list"].([]any)
	if len(pts) == 0 {
		t.Fatalf("no history point: %v", hist)
	}
	same("a point", pts[0].(map[string]any), "width", "width_ms")
	rep := call("GET", fmt.Sprintf("/api/v1/incidents/%d", inc), "")
	sum, _ := rep["summary"].(map[string]any)
	same("an incident", sum, "duration", "duration_ms")
	same("an incident", sum, "time_to_first_open", "time_to_first_open_ms")

	doc := loadOpenAPI(t)
	for schema, fields := range map[string][]string{
		"Point": {"width"}, "Command": {"ttl"}, "HoldRecord": {"ttl"}, "IncidentSummary": {"duration", "time_to_first_open"},
		"DependencySummary": {"p50", "p99"}, "HoldPeriod": {"p50", "p99"},
	} {
		props := doc.Components.Schemas[schema].Value.Properties
		for _, f := range fields {
			if p := props[f]; p == nil || !p.Value.Deprecated {
				t.Errorf("%s.%s is not marked deprecated", schema, f)
			}
			if props[f+"_ms"] == nil {
				t.Errorf("%s has no %s_ms", schema, f)
			}
		}
	}
	if at := doc.Components.Schemas["TransitionRecord"].Value.AllOf[1].Value.Properties["at"]; !at.Value.Deprecated {
		t.Error("a stored transition's Unix ms at is not marked deprecated beside at_time")
	}
	if doc.Info.Version != "1.2.0" {
		t.Errorf("the document's version is %q, want 1.2.0 (additions)", doc.Info.Version)
	}
}
