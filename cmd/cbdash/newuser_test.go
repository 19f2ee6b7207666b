package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// newUserStack is a server with one live instance, checkout-1, whose
// breaker is checkout/payments (and an alert service, with alerts), and
// an operator's token: env for the CLI.
func newUserStack(t *testing.T, alerts bool) (*stacktest.Stack, map[string]string) {
	t.Helper()
	o := stacktest.Options{Clock: clocktest.Virtual()}
	if alerts {
		o.Alert = func(*alert.Config) {}
	}
	st := stacktest.Start(t, o)
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 20, Successes: 20}})
	eventually.True(t, "checkout/payments live", func() bool {
		_, err := st.Collector.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil
	})
	u, err := st.Store.CreateUser(t.Context(), "ada", cbdash.RoleOperator, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Store.CreateUserToken(t.Context(), u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	return st, map[string]string{"CBDASH_SERVER": st.URL(), "CBDASH_TOKEN": token}
}

func liveHolds(t *testing.T, st *stacktest.Stack) []cbdash.HoldRecord {
	t.Helper()
	live, err := st.Store.Holds(t.Context(), cbdash.HoldQuery{LiveAt: st.Clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// A mistyped target is refused, naming the breakers the service has (or
// that the service is unknown), and nothing is held; --allow-empty holds
// it with a warning saying how to end it, and `release SERVICE/BREAKER`
// ends it although no instance has that breaker.
func TestCLIHoldOnATargetNoInstanceHas(t *testing.T) {
	t.Parallel()
	st, env := newUserStack(t, false)
	clk := st.Clock
	code, out, stderr := cliOn(t, clk, env, "trip", "checkout/paymnets", "--for", "1m", "--reason", "typo test")
	if code != 1 || !strings.Contains(stderr, "checkout/paymnets matches no live instance now: service checkout has one breaker, payments") ||
		!strings.Contains(stderr, "--allow-empty") || strings.Contains(out, "hold ") {
		t.Errorf("trip on a typo: exit %d, out %q, err %q; want a refusal naming payments and --allow-empty", code, out, stderr)
	}
	code, _, stderr = cliOn(t, clk, env, "hold-closed", "chekout/payments", "--for", "1m", "--reason", "typo test")
	if code != 1 || !strings.Contains(stderr, "service chekout is unknown: no live instance reports it (live services: checkout)") {
		t.Errorf("hold-closed on an unknown service: exit %d, err %q", code, stderr)
	}
	if hs := liveHolds(t, st); len(hs) != 0 {
		t.Fatalf("refused holds were created: %v", hs)
	}
	code, out, _ = cliOn(t, clk, env, "trip", "checkout/paymnets", "--for", "1m", "--reason", "typo test", "--dry-run")
	if code != 0 || !strings.Contains(out, "service checkout has one breaker, payments; the hold would need --allow-empty") {
		t.Errorf("dry run on a typo: exit %d, out %q", code, out)
	}

	code, out, stderr = cliOn(t, clk, env, "trip", "checkout/ledger", "--for", "1m", "--reason", "ahead of the deploy", "--allow-empty")
	if code != 0 || !strings.Contains(out, "0 instance(s) now") || !strings.Contains(stderr, "warning: checkout/ledger matches no live instance now") ||
		!strings.Contains(stderr, "cbdash release checkout/ledger --reason") {
		t.Fatalf("trip --allow-empty: exit %d, out %q, err %q", code, out, stderr)
	}
	if hs := liveHolds(t, st); len(hs) != 1 {
		t.Fatalf("live holds after trip --allow-empty: %v", hs)
	}
	code, out, stderr = cliOn(t, clk, env, "release", "checkout/ledger", "--reason", "cleanup")
	if code != 0 || !strings.Contains(out, "it ended hold") {
		t.Errorf("release by name: exit %d, out %q, err %q", code, out, stderr)
	}
	if hs := liveHolds(t, st); len(hs) != 0 {
		t.Errorf("the hold is still live after release by name: %v", hs)
	}
	// No hold: a sentence, not a table header over a placeholder.
	if code, out, _ := cliOn(t, clk, env, "holds"); code != 0 || out != "no hold in force (cbdash holds --all: also the holds that ended)\n" {
		t.Errorf("holds with none in force: exit %d, out %q", code, out)
	}
}

// Without a token, a command that needs one says so, not what the
// server's CSRF check or role check said.
func TestCLIWithoutATokenSaysSo(t *testing.T) {
	t.Parallel()
	st, _ := newUserStack(t, false)
	env := map[string]string{"CBDASH_SERVER": st.URL()}
	for _, args := range [][]string{
		{"trip", "checkout/payments", "--for", "1m", "--reason", "x", "--dry-run"},
		{"status"}, // refused by the server (no --anonymous)
	} {
		code, _, stderr := cliOn(t, st.Clock, env, args...)
		if code == 0 || !strings.Contains(stderr, "no API token: set CBDASH_TOKEN or pass --token") ||
			strings.Contains(stderr, "CSRF") || strings.Contains(stderr, "role") {
			t.Errorf("%v without a token: exit %d, err %q", args, code, stderr)
		}
	}
}

// `status */BREAKER` lists that breaker of every service; another
// wildcard is a usage error saying which ones status takes.
func TestCLIStatusWildcards(t *testing.T) {
	t.Parallel()
	st, env := newUserStack(t, false)
	code, out, stderr := cliOn(t, st.Clock, env, "status", "*/payments")
	if code != 0 || !strings.Contains(out, "checkout/payments") {
		t.Errorf("status */payments: exit %d, out %q, err %q", code, out, stderr)
	}
	code, _, stderr = cliOn(t, st.Clock, env, "status", "*/inventory")
	if code != 1 || !strings.Contains(stderr, "no live service has a breaker inventory") {
		t.Errorf("status */inventory: exit %d, err %q", code, stderr)
	}
	code, out, _ = cliOn(t, st.Clock, env, "status", "checkout/*")
	if code != 0 || !strings.Contains(out, "checkout/payments") {
		t.Errorf("status checkout/*: exit %d, out %q", code, out)
	}
	code, _, stderr = cliOn(t, st.Clock, env, "status", "check*")
	if code != 2 || !strings.Contains(stderr, "*/BREAKER") {
		t.Errorf("status check*: exit %d, err %q", code, stderr)
	}
}

// A silence without an end names the CLI's flags; one that matches no
// live breaker is created with a warning.
func TestCLISilenceMistakes(t *testing.T) {
	t.Parallel()
	st, env := newUserStack(t, true)
	code, _, stderr := cliOn(t, st.Clock, env, "alerts", "silence", "--service", "checkout", "--reason", "x")
	if code != 2 || !strings.Contains(stderr, "--for") || !strings.Contains(stderr, "--until") || strings.Contains(stderr, "ends_at") {
		t.Errorf("silence without an end: exit %d, err %q", code, stderr)
	}
	code, out, stderr := cliOn(t, st.Clock, env, "alerts", "silence", "--label", "nosuch=label", "--for", "1h", "--reason", "x")
	if code != 0 || !strings.Contains(out, "created silence") || !strings.Contains(stderr, "warning: silence 1 (nosuch=label) matches no live breaker now") {
		t.Errorf("silence on a label nothing has: exit %d, out %q, err %q", code, out, stderr)
	}
	code, _, stderr = cliOn(t, st.Clock, env, "alerts", "silence", "--service", "checkout", "--for", "1h", "--reason", "x")
	if code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("silence on a live service: exit %d, err %q", code, stderr)
	}
}

// `cbdash holds report` prints the report without the Markdown's escapes
// (`\*`, `&gt;`); --markdown prints them, for a file.
func TestCLIHoldsReportReadsInATerminal(t *testing.T) {
	t.Parallel()
	st, env := newUserStack(t, false)
	ada := cbdash.Actor{Name: "ada", Role: cbdash.RoleOperator, Kind: cbdash.ActorUser}
	h, err := st.Collector.CreateHold(t.Context(), ada, cbdash.HoldRequest{Selector: cbdash.Selector{Service: cbdash.AnyService, Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "failure rate > 20 %"})
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cliOn(t, st.Clock, env, "holds", "report", h.ID)
	if code != 0 || !strings.Contains(out, "force open */payments") || !strings.Contains(out, "failure rate > 20 %") ||
		strings.Contains(out, `\*`) || strings.Contains(out, "&gt;") {
		t.Errorf("holds report: exit %d, err %q, out:\n%s", code, stderr, out)
	}
	code, out, _ = cliOn(t, st.Clock, env, "holds", "report", h.ID, "--markdown")
	if code != 0 || !strings.Contains(out, `force open \*/payments`) || !strings.Contains(out, "failure rate &gt; 20 %") {
		t.Errorf("holds report --markdown: exit %d, out:\n%s", code, out)
	}
}

// `cbdash incidents` lists the incidents; `incidents show ID` prints one
// (--export md and json as the API exports them).
func TestCLIIncidents(t *testing.T) {
	t.Parallel()
	st, env := newUserStack(t, false)
	clk := st.Clock
	id, err := st.Store.CreateIncident(t.Context(), cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Start: clk.Now().Add(-time.Minute), Open: true, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1",
		FirstCause: protocol.Cause{Kind: "failure_rate"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := strconv.FormatInt(id, 10)
	code, out, stderr := cliOn(t, clk, env, "incidents", "--open")
	if code != 0 || !strings.Contains(out, "INCIDENT") || !regexp.MustCompile(ids+`\s+checkout/payments\s+.*open\s+1m0s\s+1\s+1\s+checkout-1: failure_rate`).MatchString(out) {
		t.Errorf("incidents --open: exit %d, err %q, out:\n%s", code, stderr, out)
	}
	if code, out, _ := cliOn(t, clk, env, "incidents", "search/search"); code != 0 || out != "no incident\n" {
		t.Errorf("incidents search/search: exit %d, out:\n%s", code, out)
	}
	code, out, stderr = cliOn(t, clk, env, "incidents", "show", ids)
	if code != 0 || !strings.Contains(out, "checkout/payments") || !strings.Contains(out, "Incident "+ids) {
		t.Errorf("incidents show: exit %d, err %q, out:\n%s", code, stderr, out)
	}
	code, out, _ = cliOn(t, clk, env, "incidents", "show", ids, "--export", "json")
	var rep map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Errorf("incidents show --export json: exit %d, out:\n%s", code, out)
	}
	if code, _, stderr := cliOn(t, clk, env, "incidents", "show", ids, "--export", "pdf"); code != 2 || !strings.Contains(stderr, "md or json") {
		t.Errorf("--export pdf: exit %d, err %q", code, stderr)
	}
	if code, _, stderr := cliOn(t, clk, env, "incidents", "show", "999"); code != 1 || !strings.Contains(stderr, "999") {
		t.Errorf("show 999: exit %d, err %q", code, stderr)
	}
}
