package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// recordIncident has two instances of checkout/payments report, through
// the ingest API, three minutes from base on, around an incident that
// starts at base+60s and ends at base+100s: windows every second and
// transitions. It stores what the incident service and an operator would
// have added (an applied command, a configuration change, the incident and
// another, open one) and returns the incident's ID.
func recordIncident(t *testing.T, h *harness, base time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	st := h.st
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	cfg := breakerConfig(k.Breaker)
	ms := func(sec float64) int64 { return base.Add(time.Duration(sec * float64(time.Second))).UnixMilli() }
	trip := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 70, Threshold: 50, WindowCalls: 20, WindowFailed: 14}
	trs := map[string][]protocol.Transition{
		"checkout-1": {
			{Breaker: k.Breaker, From: "closed", To: "open", At: ms(60), Cause: trip, OpenMillis: 5000},
			{Breaker: k.Breaker, From: "open", To: "half_open", At: ms(65), Cause: protocol.Cause{Kind: protocol.CauseOpenElapsed}},
			{Breaker: k.Breaker, From: "half_open", To: "open", At: ms(65.2), Cause: protocol.Cause{Kind: protocol.CauseProbeFailed, ProbeOutcome: "error"}},
			{Breaker: k.Breaker, From: "open", To: "forced_open", At: ms(70), Cause: protocol.Cause{Kind: protocol.CauseCommand, Action: protocol.ActionForceOpen, Actor: "otto"}},
			{Breaker: k.Breaker, From: "forced_open", To: "closed", At: ms(95), Cause: protocol.Cause{Kind: protocol.CauseCommand, Action: protocol.ActionRelease, Actor: "otto"}},
		},
		"checkout-2": {
			{Breaker: k.Breaker, From: "closed", To: "open", At: ms(62), Cause: trip, OpenMillis: 5000},
			{Breaker: k.Breaker, From: "open", To: "half_open", At: ms(67), Cause: protocol.Cause{Kind: protocol.CauseOpenElapsed}},
			{Breaker: k.Breaker, From: "half_open", To: "closed", At: ms(100), Cause: protocol.Cause{Kind: protocol.CauseProbesSucceeded}},
		},
	}
	for inst, list := range trs {
		b := protocol.Batch{Transitions: list}
		state := "closed"
		for sec := 0; sec < 180; sec++ {
			for _, tr := range list {
				if tr.At < ms(float64(sec+1)) && tr.At >= ms(float64(sec)) {
					state = tr.To
				}
			}
			w := protocol.Window{Breaker: k.Breaker, Start: ms(float64(sec)), Millis: 1000, State: state,
				Latency: make([]int64, protocol.NumLatencyBuckets)}
			c := &w.Counts
			switch state {
			case "closed", "half_open":
				c.Admitted = 20
				if sec >= 50 && sec < 90 {
					c.Failures, c.Errors, c.Slow = 12, 12, 4
				}
				c.Successes = c.Admitted - c.Failures
				w.Latency[4], w.Latency[8] = c.Successes, c.Failures
				w.LatencySumMs = float64(c.Successes*20 + c.Failures*400)
			default:
				c.RejectedOpen, c.FallbackSuccess, c.FallbackFailure = 20, 18, 2
			}
			b.Windows = append(b.Windows, w)
		}
		h.ingest(k.Service, inst, b)
	}
	at := base.Add(69800 * time.Millisecond)
	if err := st.CreateCommand(ctx, cbdash.Command{ID: "cmd-force", CommandRequest: cbdash.CommandRequest{Service: k.Service, Breaker: k.Breaker,
		Action: protocol.ActionForceOpen, Instance: "checkout-1", TTL: 15 * time.Minute, Reason: "serve the cached prices", Actor: "otto"},
		IssuedAt: at, ExpiresAt: at.Add(15 * time.Minute),
		Targets: []cbdash.CommandTarget{{Instance: "checkout-1", Status: cbdash.TargetApplied, State: protocol.StateForcedOpen, At: base.Add(70 * time.Second)}}}); err != nil {
		t.Fatal(err)
	}
	lower := cfg
	lower.FailureRateThreshold = 40
	if _, err := st.SaveConfigChange(ctx, cbdash.ConfigChange{DependencyKey: k, Instance: "checkout-2", At: base.Add(80 * time.Second), Previous: cfg, Config: lower}); err != nil {
		t.Fatal(err)
	}
	id, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: k, Start: base.Add(60 * time.Second), End: base.Add(100 * time.Second),
		Instances: []string{"checkout-1", "checkout-2"}, Opens: 3, FirstInstance: "checkout-1", FirstCause: trip})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "search", Breaker: "index"},
		Start: base.Add(150 * time.Second), Open: true, Instances: []string{"search-1"}, Opens: 1, FirstInstance: "search-1"}); err != nil {
		t.Fatal(err)
	}
	return id
}

// newIncidentHarness starts a harness, records the incident of
// recordIncident starting at the clock's epoch and moves the clock ten
// minutes on, after its end. It returns the incident's ID and its base.
func newIncidentHarness(t *testing.T) (*harness, int64, time.Time) {
	t.Helper()
	h := newHarness(t, web.Config{})
	base := h.clock.Now()
	h.virtual().Advance(3 * time.Minute) // the reports arrive after the fact
	id := recordIncident(t, h, base)
	h.virtual().Advance(7 * time.Minute)
	return h, id, base
}

// formTime is the layout of the incident list's from and to fields.
const formTime = "2006-01-02T15:04"

func TestIncidentPages(t *testing.T) {
	t.Parallel()
	h, id, base := newIncidentHarness(t)
	path := "/incidents/" + strconv.FormatInt(id, 10)
	vera, otto := h.login("vera"), h.login("otto")

	t.Run("the list shows incidents newest first and filters", func(t *testing.T) {
		res := vera.get("/incidents")
		if res.status != http.StatusOK || strings.Count(res.body, `data-testid="incident-row"`) != 2 {
			t.Fatalf("GET /incidents: %d\n%s", res.status, res.body)
		}
		if i, j := strings.Index(res.body, "search/index"), strings.Index(res.body, "checkout/payments"); i < 0 || j < 0 || i > j {
			t.Errorf("not newest first: search/index at %d, checkout/payments at %d", i, j)
		}
		for q, want := range map[string]string{"?open=true": "search/index", "?service=checkout": "checkout/payments",
			"?breaker=payments&from=" + base.Format(formTime) + "&to=" + base.Add(2*time.Minute).Format(formTime): "checkout/payments"} {
			res := vera.get("/incidents" + q)
			if res.status != http.StatusOK || strings.Count(res.body, `data-testid="incident-row"`) != 1 || !strings.Contains(res.body, want) {
				t.Errorf("GET /incidents%s: %d, want only %s", q, res.status, want)
			}
		}
		frag := vera.get("/incidents?open=true&fragment=1")
		if strings.Contains(frag.body, "<html") || !strings.Contains(frag.body, `id="incident-list"`) {
			t.Errorf("fragment is not the bare list:\n%s", frag.body)
		}
		if res := vera.get("/incidents?from=later"); res.status != http.StatusBadRequest {
			t.Errorf("bad from: %d, want 400", res.status)
		}
	})
	t.Run("the incident page has a lane per instance and markers", func(t *testing.T) {
		res := vera.get(path)
		if res.status != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, res.status, res.body)
		}
		for want, n := range map[string]int{
			`data-testid="instance-lane"`: 2, `data-kind="command"`: 1, `data-kind="config"`: 1, `data-kind="start"`: 1, `data-kind="end"`: 1,
			`data-state="forced-open"`: 1, `data-testid="chart"`: 5, `data-testid="incident-lanes"`: 1,
		} {
			if got := strings.Count(res.body, want); got != n {
				t.Errorf("%s appears %d times, want %d", want, got, n)
			}
		}
		for _, want := range []string{base.Add(time.Minute).Format("2006-01-02 15:04:05"), "40s", "checkout-1: failure rate 70.0% reached the threshold 50%",
			"serve the cached prices", "failure rate threshold 50 → 40", `href="/api/v1/incidents/` + strconv.FormatInt(id, 10) + `/export.md"`} {
			if !strings.Contains(res.body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(res.body, `data-testid="note-form"`) {
			t.Error("a viewer is offered the note form")
		}
	})
	t.Run("time before the first record is blank, not closed", func(t *testing.T) {
		// The report starts two minutes before the incident (base+60s),
		// a minute before the first window (base): no lane paints it.
		res := vera.get(path)
		if !strings.Contains(res.body, `data-testid="lanes-no-data-until"`) || !strings.Contains(res.body, "No record before "+base.Format("15:04:05")+" UTC") {
			t.Errorf("the lanes do not say where the record starts")
		}
		// The lanes' x axis runs from 46 to 550 over the report's 220 s
		// (base-60s to base+160s: the end at base+100s and a minute's
		// tail); base is 60/220 of the way.
		xs := spanXs(t, res.body)
		if len(xs) == 0 {
			t.Fatal("no lane span")
		}
		for _, x := range xs {
			if x < 46+504*60/220.0-0.5 {
				t.Errorf("a lane span starts at x=%.1f, before the first record", x)
			}
		}
	})
	t.Run("operators add notes; viewers and forged forms cannot", func(t *testing.T) {
		if res := vera.postForm(path+"/notes", url.Values{"text": {"from a viewer"}}); res.status != http.StatusForbidden {
			t.Errorf("viewer note: %d, want 403", res.status)
		}
		if res := otto.rawPost(path+"/notes", url.Values{"text": {"forged"}}); res.status != http.StatusForbidden {
			t.Errorf("note without CSRF token: %d, want 403", res.status)
		}
		if res := otto.postForm(path+"/notes", url.Values{"text": {"   "}}); res.status != http.StatusBadRequest {
			t.Errorf("empty note: %d, want 400", res.status)
		}
		if res := otto.postForm(path+"/notes", url.Values{"text": {"<b>payments</b> rolled back"}}); res.status != http.StatusSeeOther {
			t.Fatalf("note: %d %s", res.status, res.body)
		}
		res := otto.get(path)
		if !strings.Contains(res.body, "&lt;b&gt;payments&lt;/b&gt; rolled back") || !strings.Contains(res.body, `data-testid="note-form"`) {
			t.Errorf("the note is not shown escaped, or the operator has no form")
		}
	})
	t.Run("unknown incidents are 404", func(t *testing.T) {
		for _, p := range []string{"/incidents/999", "/incidents/abc"} {
			if res := vera.get(p); res.status != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", p, res.status)
			}
		}
	})
}

// spanXs is the x of every lane span of an incident page.
func spanXs(t *testing.T, body string) []float64 {
	t.Helper()
	var xs []float64
	for _, m := range regexp.MustCompile(`data-testid="lane-span" data-state="[^"]*" x="([0-9.]+)"`).FindAllStringSubmatch(body, -1) {
		x, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	return xs
}
