package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// holdStack is a dashboard on the real collector and store, fed by
// instances that report over HTTP ingest: each report is one request,
// so what the collector has seen is known when the request returns.
type holdStack struct {
	*harness
	col   *collector.Collector
	clk   *clocktest.Running
	token string
	seq   map[string]uint64
}

func startHoldStack(t *testing.T) *holdStack {
	t.Helper()
	clk := clocktest.NewRunning()
	h := start(t, web.Config{}, clk)
	for _, u := range []struct{ name, role string }{{"vera", cbdash.RoleViewer}, {"otto", cbdash.RoleOperator}} {
		h.addUser(u.name, u.role, "password-"+u.name)
	}
	return &holdStack{harness: h, col: h.col, clk: clk, token: h.stack.AgentToken, seq: map[string]uint64{}}
}

var paymentsConfig = protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50,
	MinimumCalls: 5, OpenDurationMillis: 30000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}

var gobreakerConfig = protocol.BreakerConfig{Name: "search", Library: "sony/gobreaker v2", HoldsUnsupported: true,
	Settings: protocol.NewSettings(map[string]string{"MaxRequests": "1", "Interval": "0s", "Timeout": "30s"})}

// report is one HTTP ingest of an instance (started at started): a
// one-second window per breaker with counts c in state, plus the given
// transitions and command results. It returns the commands the response
// carried.
type report struct {
	service, instance string
	started           time.Time
	breakers          []protocol.BreakerConfig
	state             string
	counts            protocol.Counts
	transitions       []protocol.Transition
	results           []protocol.CommandResult
}

func (s *holdStack) ingest(r report) []protocol.Command {
	s.t.Helper()
	key := r.service + "/" + r.instance
	s.seq[key]++
	now := s.clk.Now().UnixMilli()
	if r.state == "" {
		r.state = protocol.StateClosed
	}
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: s.seq[key], SentAt: now, Transitions: r.transitions, CommandResults: r.results}
	for _, bc := range r.breakers {
		// The window ends a millisecond ahead, so that it ends after a hold
		// sent in the same millisecond.
		b.Windows = append(b.Windows, protocol.Window{Breaker: bc.Name, Start: now - 999, Millis: 1000, State: r.state, Counts: r.counts})
	}
	req := protocol.IngestRequest{Batch: b, Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: r.service,
		Instance: r.instance, SDKVersion: "test", StartedAt: r.started.UnixMilli(), Labels: map[string]string{"region": "eu"}, Breakers: r.breakers}}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/ingest", strings.NewReader(string(body)))
	hr.Header.Set("Authorization", "Bearer "+s.token)
	hr.Header.Set("Content-Type", "application/json")
	res := s.client().do(hr)
	var resp protocol.IngestResponse
	if err := json.Unmarshal([]byte(res.body), &resp); res.status != http.StatusOK || err != nil {
		s.t.Fatalf("ingest %s: %d %s", key, res.status, res.body)
	}
	return resp.Commands
}

// applyHold answers the hold command among cmds as an agent would: the
// breaker goes forced open, and its result is reported.
func (s *holdStack) applyHold(r report, cmds []protocol.Command) {
	s.t.Helper()
	if len(cmds) != 1 || cmds[0].Action != protocol.ActionForceOpen {
		s.t.Fatalf("%s/%s was sent %+v, want one force open", r.service, r.instance, cmds)
	}
	c := cmds[0]
	now := s.clk.Now().UnixMilli()
	r.state = protocol.StateForcedOpen
	r.transitions = []protocol.Transition{{Breaker: c.Breaker, From: protocol.StateClosed, To: protocol.StateForcedOpen, At: now, Generation: 1,
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: c.ID, Action: c.Action, Actor: c.Actor, Reason: c.Reason, ExpiresAt: now + c.TTLMillis}}}
	r.results = []protocol.CommandResult{{ID: c.ID, Breaker: c.Breaker, OK: true, State: protocol.StateForcedOpen, At: now}}
	// While held open, every call is rejected: 7 answered by a fallback
	// that served, 3 by one that failed.
	r.counts = protocol.Counts{RejectedForced: 10, FallbackSuccess: 7, FallbackFailure: 3}
	if more := s.ingest(r); len(more) != 0 {
		s.t.Fatalf("after answering, %s/%s was sent %+v", r.service, r.instance, more)
	}
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

var holdIDRe = regexp.MustCompile(`/holds/(h[0-9a-f]+)`)

func TestAFleetWideHoldFromTheDependencyPageAndItsDrillReport(t *testing.T) {
	t.Parallel()
	s := startHoldStack(t)
	before := s.clk.Now().Add(-time.Minute)
	pay := func(service, instance string) report {
		return report{service: service, instance: instance, started: before, breakers: []protocol.BreakerConfig{paymentsConfig},
			counts: protocol.Counts{Admitted: 10, Successes: 9, Failures: 1, Errors: 1}}
	}
	fleet := []report{pay("checkout", "checkout-1"), pay("checkout", "checkout-2"), pay("catalog", "catalog-1")}
	for _, r := range fleet {
		if cmds := s.ingest(r); len(cmds) != 0 {
			t.Fatalf("commands before any hold: %+v", cmds)
		}
	}
	search := report{service: "catalog", instance: "catalog-1", started: before, breakers: []protocol.BreakerConfig{paymentsConfig, gobreakerConfig}}
	s.ingest(search)

	otto := s.login("otto")
	depPage := "/dependency?" + url.Values{"service": {"checkout"}, "breaker": {"payments"}}.Encode()
	page := otto.get(depPage)
	mustContain(t, "the dependency page", page.body, `data-testid="hold-form"`, `value="*"`, "*/payments", `href="/holds"`, "at most 1440: 24h, --max-hold", `max="1440"`)

	form := url.Values{"from": {"checkout"}, "service": {"*"}, "breaker": {"payments"}, "action": {protocol.ActionForceOpen},
		"labels": {"region=eu"}, "ttl": {"1500"}, "reason": {"drill the payments fallback"}}
	res := otto.postForm("/holds/confirm", form)
	if res.status != http.StatusBadRequest {
		t.Errorf("a 25h hold: %d, want 400", res.status)
	}
	mustContain(t, "the refusal of a 25h hold", res.body, `data-testid="hold-error"`, "longer than the maximum hold duration 24h0m0s")
	if strings.Contains(res.body, "hold-confirm-button") {
		t.Error("a refused hold can still be confirmed")
	}

	form.Set("ttl", "20")
	res = otto.postForm("/holds/confirm", form)
	if res.status != http.StatusOK {
		t.Fatalf("confirm: %d %s", res.status, res.body)
	}
	mustContain(t, "the blast radius", res.body, "This will reject every call from 3 instances of 2 services (catalog, checkout) to payments for 20m0s",
		"catalog/catalog-1, checkout/checkout-1, checkout/checkout-2", "Share reached: 3 of 3", `data-testid="hold-confirm-button"`)
	if holds, _ := s.col.Holds(context.Background(), false, 0); len(holds) != 0 {
		t.Fatalf("the dry run created %d holds", len(holds))
	}

	res = otto.postForm("/holds", form)
	m := holdIDRe.FindStringSubmatch(res.header.Get("Location"))
	if res.status != http.StatusSeeOther || m == nil {
		t.Fatalf("create: %d to %q: %s", res.status, res.header.Get("Location"), res.body)
	}
	id := m[1]

	// Every instance gets it at its next ingest, and one started later too.
	// (The ingest that brings the hold reports no calls: the hold's
	// coverage starts when it was created, so calls reported then would
	// fall before or after that instant depending on the machine's speed.)
	idle := func(r report) report { r.counts = protocol.Counts{}; return r }
	for _, r := range fleet {
		s.applyHold(r, s.ingest(idle(r)))
	}
	late := pay("checkout", "checkout-3")
	late.started = s.clk.Now()
	s.applyHold(late, s.ingest(idle(late)))

	report := otto.get("/holds/" + id)
	if report.status != http.StatusOK {
		t.Fatalf("report: %d %s", report.status, report.body)
	}
	mustContain(t, "the drill report", report.body, "applied, now forced open",
		"Drill report: force open */payments region=eu", `data-testid="sum-who">otto`, "drill the payments fallback",
		"4 instances: catalog/catalog-1, checkout/checkout-1, checkout/checkout-2, checkout/checkout-3",
		`data-testid="sum-late">checkout/checkout-3`, `data-testid="sum-rejected">40`, `data-testid="sum-fallbacks">40 (28 served, 12 failed)`,
		`data-testid="joined-late"`, "ongoing, expires", `href="/api/v1/holds/`+id+`/report.md"`, `href="/api/v1/holds/`+id+`/report"`,
		`data-testid="release-form"`, "Callers before and during")
	if n := strings.Count(report.body, `data-testid="report-instance"`); n != 4 {
		t.Errorf("%d instance rows, want 4", n)
	}
	// Total: 40 rejected, 28 served by a fallback: 12 of 40 calls failed
	// for the callers.
	total := report.body[strings.Index(report.body, `data-testid="report-total"`):]
	mustContain(t, "the total row", total, `data-testid="rejected">40`, `data-testid="fallbacks-served">28`, `data-testid="fallbacks-failed">12`, `data-testid="error-rate">30.0%`)
	if md := otto.get("/api/v1/holds/" + id + "/report.md"); md.status != http.StatusOK || !strings.Contains(md.body, "# Drill report: force open \\*/payments") {
		t.Errorf("Markdown export: %d %s", md.status, md.body)
	}

	// The list, the audit log and the dependency page link to it.
	list := otto.get("/holds")
	mustContain(t, "the holds list", list.body, `href="/holds/`+id+`"`, "*/payments region=eu", "(in <span data-until=", ">19m", "4 instance breakers (1 joined later): 4 applied")
	audit := otto.get("/audit")
	mustContain(t, "the audit log", audit.body, `data-testid="audit-hold"`, `href="/holds/`+id+`"`)
	page = otto.get(depPage)
	mustContain(t, "the dependency page", page.body, `data-testid="current-holds"`, `data-testid="hold-governs">checkout-1, checkout-2, checkout-3`,
		`data-testid="instance-hold"`, "hold "+id)
	overview := otto.get("/")
	mustContain(t, "the overview", overview.body, "held open", `data-testid="held-report"`, `href="/holds/`+id+`"`)
	// One end everywhere: the tile's "held until" is the hold's expiry to
	// the millisecond, not the one each agent worked out from the TTL.
	created, err := s.col.Hold(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	until := `data-until="` + created.Until.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `"`
	mustContain(t, "the holds list", list.body, until)
	mustContain(t, "the overview", overview.body, until)

	// A second, narrower hold wins where it matches: the most recent.
	newer, err := s.col.CreateHold(context.Background(), cbdash.Actor{Name: "otto"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments", Instances: []string{"checkout-2"}},
		Action: protocol.ActionForceClosed, TTL: 5 * time.Minute, Reason: "let checkout-2 through", Actor: "otto"})
	if err != nil {
		t.Fatal(err)
	}
	page = otto.get(depPage)
	mustContain(t, "the dependency page with two holds", page.body, `data-testid="hold-governs">checkout-1, checkout-3`, `data-testid="hold-governs">checkout-2`,
		"the most recent wins")
	if strings.Index(page.body, newer.ID) > strings.Index(page.body, ">"+id+"<") {
		t.Error("the newer hold is not listed first")
	}

	// Release from the report: it says who and why, and it moves to the
	// past holds of the dependency.
	if res := otto.postForm("/holds/"+id+"/release", url.Values{"reason": {"drill over"}}); res.status != http.StatusSeeOther {
		t.Fatalf("release: %d %s", res.status, res.body)
	}
	report = otto.get("/holds/" + id)
	mustContain(t, "the released report", report.body, "released by otto: drill over", "applied, forced open until the hold ended")
	assertOneEnd(t, s, otto, id)
	if strings.Contains(report.body, "now forced open") {
		t.Error("the report of a released hold says its breakers are now forced open")
	}
	if strings.Contains(report.body, `data-testid="release-form"`) {
		t.Error("a released hold offers to be released")
	}
	page = otto.get(depPage)
	mustContain(t, "the dependency page after the release", page.body, `data-testid="past-holds"`, `href="/holds/`+id+`"`)

	// A viewer reads the report, but is offered no form.
	vera := s.login("vera")
	if r := vera.get("/holds/" + id); r.status != http.StatusOK || strings.Contains(r.body, "release-form") {
		t.Errorf("viewer: %d, release form shown: %v", r.status, strings.Contains(r.body, "release-form"))
	}
	if r := vera.postForm("/holds", form); r.status != http.StatusForbidden {
		t.Errorf("a viewer creating a hold: %d, want 403", r.status)
	}
}

func TestABreakerThatCannotBeHeldSaysWhyInsteadOfOfferingHolds(t *testing.T) {
	t.Parallel()
	s := startHoldStack(t)
	r := report{service: "catalog", instance: "catalog-1", started: s.clk.Now().Add(-time.Minute), breakers: []protocol.BreakerConfig{gobreakerConfig}}
	s.ingest(r)
	otto := s.login("otto")
	page := otto.get("/dependency?" + url.Values{"service": {"catalog"}, "breaker": {"search"}}.Encode())
	if page.status != http.StatusOK {
		t.Fatalf("dependency page: %d %s", page.status, page.body)
	}
	const why = "a sony/gobreaker v2 breaker cannot be held open or closed"
	mustContain(t, "the dependency page", page.body, `data-testid="operator-unsupported"`, `data-testid="holds-unsupported"`, why,
		"sony/gobreaker v2: Interval=0s, MaxRequests=1, Timeout=30s")
	for _, form := range []string{`data-testid="operator-form"`, `data-testid="hold-form"`} {
		if strings.Contains(page.body, form) {
			t.Errorf("the page offers %s for a breaker that cannot be held", form)
		}
	}
	// Asked anyway, the collector refuses with the same reason.
	res := otto.postForm("/dependency/command", url.Values{"service": {"catalog"}, "breaker": {"search"}, "action": {protocol.ActionForceOpen},
		"scope": {"all"}, "ttl": {"5"}, "reason": {"try"}})
	if res.status != http.StatusBadRequest || !strings.Contains(res.body, why) {
		t.Errorf("force open of a gobreaker breaker: %d %s", res.status, res.body)
	}
	res = otto.postForm("/holds", url.Values{"service": {"*"}, "breaker": {"search"}, "action": {protocol.ActionForceOpen}, "ttl": {"5"}, "reason": {"try"}})
	if res.status != http.StatusBadRequest || !strings.Contains(res.body, "catalog/catalog-1: "+why) {
		t.Errorf("a fleet-wide hold of a gobreaker breaker: %d %s", res.status, res.body)
	}
}

// TestAHoldGovernsOnlyTheInstancesThatCanBeHeld: of checkout-1 and
// checkout-2, whose payments breaker is a sony/gobreaker v2 one that
// cannot be held, a hold of checkout/payments governs checkout-1 alone on
// the dependency page: it is never sent to checkout-2, which runs on its
// own, as the page's note says.
func TestAHoldGovernsOnlyTheInstancesThatCanBeHeld(t *testing.T) {
	t.Parallel()
	s := startHoldStack(t)
	unheld := gobreakerConfig
	unheld.Name = "payments"
	before := s.clk.Now().Add(-time.Minute)
	s.ingest(report{service: "checkout", instance: "checkout-1", started: before, breakers: []protocol.BreakerConfig{paymentsConfig}})
	s.ingest(report{service: "checkout", instance: "checkout-2", started: before, breakers: []protocol.BreakerConfig{unheld}})
	if _, err := s.col.CreateHold(context.Background(), cbdash.Actor{Name: "otto"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: 5 * time.Minute, Reason: "drill the payments fallback", Actor: "otto"}); err != nil {
		t.Fatal(err)
	}
	page := s.login("otto").get("/dependency?" + url.Values{"service": {"checkout"}, "breaker": {"payments"}}.Encode())
	mustContain(t, "the dependency page", page.body, `data-testid="hold-governs">checkout-1</td>`,
		"checkout-2 cannot be held: a sony/gobreaker v2 breaker cannot be held open or closed")
}

// assertOneEnd checks that released hold id shows one end, its release,
// in the holds list, its drill report and the API's hold record, and
// not its planned expiry beside it.
func assertOneEnd(t *testing.T, s *holdStack, c *client, id string) {
	t.Helper()
	h, err := s.col.Hold(context.Background(), id)
	if err != nil || h.ReleasedAt.IsZero() {
		t.Fatalf("hold %s: %+v, %v: want it released", id, h, err)
	}
	end, expiry := h.ReleasedAt.UTC().Format("2006-01-02 15:04:05"), h.Until.UTC().Format("2006-01-02 15:04:05")
	list := c.get("/holds").body
	row := list[strings.Index(list, `data-hold="`+id+`"`):]
	row = row[:strings.Index(row, "</tr>")]
	mustContain(t, "the released hold's row", row, end+" (released by otto)")
	mustContain(t, "the released hold's report", c.get("/holds/"+id).body, `data-testid="sum-end">`+end+", released by otto")
	var rec struct {
		End        time.Time `json:"end"`
		ReleasedAt time.Time `json:"released_at"`
		Until      time.Time `json:"until"`
	}
	res := c.get("/api/v1/holds/" + id)
	if err := json.Unmarshal([]byte(res.body), &rec); err != nil || res.status != http.StatusOK {
		t.Fatalf("GET /api/v1/holds/%s: %d %s", id, res.status, res.body)
	}
	if !rec.End.Equal(rec.ReleasedAt) || rec.End.Equal(rec.Until) {
		t.Errorf("the API's hold: end %v, released_at %v, until %v: want end = released_at", rec.End, rec.ReleasedAt, rec.Until)
	}
	if strings.Contains(row, expiry) {
		t.Errorf("the released hold's row %q still shows its planned expiry %s", row, expiry)
	}
}
