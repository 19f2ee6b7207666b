package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestHoldAPIRefusesHoldsOverTheMaximumShowsTheBlastRadiusAndActsAsTheCaller
// drives the hold endpoints with an operator's API token: a hold longer
// than the maximum is refused naming the limit (as a hold, a dry run or a
// force command), a dry run changes nothing, and the hold and its release
// are the caller's whatever the body says, on the wire and in the report.
func TestHoldAPIRefusesHoldsOverTheMaximumShowsTheBlastRadiusAndActsAsTheCaller(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("api", "db", 1, 0))
	otto, _, _ := h.st.UserByName(t.Context(), "otto")
	token, err := h.st.CreateUserToken(t.Context(), otto.ID, "holds")
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
	limit := "maximum hold duration " + cbdash.DefaultMaxHold.String()
	for _, path := range []string{"/api/v1/holds", "/api/v1/holds/plan", "/api/v1/holds?dry_run=1"} {
		code, body := call("POST", path, `{"selector":{"service":"api","breaker":"db"},"action":"force_open","ttl":"87600h","reason":"x"}`)
		if code != http.StatusBadRequest || !strings.Contains(body, limit) {
			t.Fatalf("POST %s of ten years: %d %s, want 400 naming the limit", path, code, body)
		}
	}
	if code, body := call("POST", "/api/v1/commands", `{"service":"api","breaker":"db","action":"force_open","ttl":"87600h","reason":"x"}`); code != http.StatusBadRequest || !strings.Contains(body, limit) {
		t.Fatalf("a force command of ten years: %d %s, want 400 naming the limit", code, body)
	}
	if code, body := call("POST", "/api/v1/holds", `{"selector":{"service":"api","breaker":"db"},"action":"force_open","ttl":true,"reason":"x"}`); code != http.StatusBadRequest || !strings.Contains(body, "ttl") {
		t.Fatalf("a ttl that is neither: %d %s, want 400 naming ttl", code, body)
	}

	code, body := call("POST", "/api/v1/holds/plan", `{"selector":{"service":"*","breaker":"db"},"action":"force_open","ttl":"10m","reason":"x"}`)
	var plan cbdash.HoldPlan
	if code != http.StatusOK || json.Unmarshal([]byte(body), &plan) != nil || len(plan.Instances) != 1 || plan.Instances[0] != "api/api-1" {
		t.Fatalf("dry run: %d %s", code, body)
	}
	if hs, _ := h.st.Holds(t.Context(), cbdash.HoldQuery{}); len(hs) != 0 {
		t.Fatalf("a dry run created %v", hs)
	}

	code, body = call("POST", "/api/v1/holds", `{"selector":{"service":"*","breaker":"db"},"action":"force_open","ttl":"10m","reason":"drill","actor":"mallory"}`)
	var hold cbdash.HoldRecord
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &hold) != nil || hold.Actor != "otto" {
		t.Fatalf("create: %d %s, want the hold by otto", code, body)
	}
	pending := func() []protocol.Command { return h.report("api", "db", "api-1", protocol.StateClosed).Commands }
	if cmds := pending(); len(cmds) != 1 || cmds[0].Action != protocol.ActionForceOpen || cmds[0].Actor != "otto" {
		t.Fatalf("the instance's pending commands %+v, want the hold by otto", cmds)
	}
	if code, body = call("POST", "/api/v1/holds/"+hold.ID+"/release", `{}`); code != http.StatusBadRequest || !strings.Contains(body, "reason") {
		t.Fatalf("release without reason: %d %s", code, body)
	}
	if code, body = call("POST", "/api/v1/holds/"+hold.ID+"/release", `{"reason":"done","actor":"mallory"}`); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	if code, md := call("GET", "/api/v1/holds/"+hold.ID+"/report.md", ""); code != http.StatusOK || !strings.Contains(md, "released by otto: done") || !strings.Contains(md, "api/api-1") {
		t.Fatalf("Markdown report: %d\n%s", code, md)
	}
}

// TestAPIRefusesControlCharactersInReasonsAndNotes: a hold's, a
// command's and a release's reason and an incident note with terminal
// controls are refused with a 400 naming the field.
func TestAPIRefusesControlCharactersInReasonsAndNotes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("api", "db", 1, 0))
	otto, _, _ := h.st.UserByName(t.Context(), "otto")
	token, err := h.st.CreateUserToken(t.Context(), otto.ID, "holds")
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
	const evil = `x\u001b[2J\u009b31m`
	for _, tc := range []struct{ path, body string }{
		{"/api/v1/holds", `{"selector":{"service":"api","breaker":"db"},"action":"force_open","ttl":"10m","reason":"` + evil + `"}`},
		{"/api/v1/commands", `{"service":"api","breaker":"db","action":"reset","reason":"` + evil + `"}`},
	} {
		if code, body := call("POST", tc.path, tc.body); code != http.StatusBadRequest || !strings.Contains(body, "reason contains the control character U+001B") {
			t.Errorf("POST %s with controls in the reason: %d %s, want 400 naming reason", tc.path, code, body)
		}
	}
	code, body := call("POST", "/api/v1/holds", `{"selector":{"service":"api","breaker":"db"},"action":"force_open","ttl":"10m","reason":"drill"}`)
	var hold cbdash.HoldRecord
	if code != http.StatusCreated && code != http.StatusOK || json.Unmarshal([]byte(body), &hold) != nil {
		t.Fatalf("a clean hold: %d %s", code, body)
	}
	if code, body := call("POST", "/api/v1/holds/"+hold.ID+"/release", `{"reason":"done\u009b"}`); code != http.StatusBadRequest || !strings.Contains(body, "U+009B") {
		t.Errorf("a release with a C1 control: %d %s, want 400 naming reason", code, body)
	}
}
