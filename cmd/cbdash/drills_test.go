package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// `cbdash trip --stop-if` on a dependency with an open incident: the dry
// run lists the refusal and exits non-zero, the trip itself is refused
// with the reason, and nothing is held.
func TestCLITripWithStopConditionsIsRefusedDuringAnIncident(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk})
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 20, Successes: 20}})
	eventually.True(t, "checkout/payments live", func() bool {
		_, err := st.Collector.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil
	})
	ctx := t.Context()
	id, err := st.Store.CreateIncident(ctx, cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Start: clk.Now(), Open: true, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1"})
	if err != nil {
		t.Fatal(err)
	}
	env := operatorEnv(t, st)
	want := "incident " + strconv.FormatInt(id, 10) + " is open on checkout/payments since "
	args := []string{"trip", "checkout/payments", "--for", "1m", "--reason", "drill", "--stop-if", "fallback-failure-rate>20%",
		"--stop-if", "error-rate>30% for 10s"}
	code, out, stderr := cliOn(t, clk, env, append(args, "--dry-run")...)
	if code == 0 || !strings.Contains(out, "refused: "+want) || !strings.Contains(stderr, "pre-flight would refuse this drill") ||
		!strings.Contains(out, "it would stop by itself if: fallback-failure-rate>20%, error-rate>30% for 10s") {
		t.Errorf("dry run: exit %d, out %q, err %q; want the refusal: %s", code, out, stderr, want)
	}
	code, out, stderr = cliOn(t, clk, env, args...)
	if code == 0 || !strings.Contains(stderr, "drill refused by pre-flight: "+want) ||
		!strings.Contains(stderr, "wait for it to end (the Incidents page, or cbdash incidents); or, to hold it anyway (a hold, not a drill), force it open without stop conditions (no --stop-if)") {
		t.Errorf("trip: exit %d, out %q, err %q; want the refusal: %s", code, out, stderr, want)
	}
	if hs, _ := st.Store.Holds(ctx, cbdash.HoldQuery{}); len(hs) != 0 {
		t.Errorf("a refused drill created %v", hs)
	}

	// `cbdash drills` lists the drills with their result: one a stop
	// condition ended says STOPPED with the breach; a plain hold is no
	// drill.
	ada := cbdash.Actor{Name: "ada", Role: cbdash.RoleOperator, Kind: cbdash.ActorUser}
	stop := cbdash.StopCondition{Metric: cbdash.StopFallbackFailureRate, Above: 20}
	drill, err := st.Collector.CreateHold(ctx, ada, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "ledger"},
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", StopIf: []cbdash.StopCondition{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Store.StopHold(ctx, drill.ID, cbdash.StopActor, cbdash.HoldBreach{Condition: stop, Value: 86, At: clk.Now(),
		Instances: []string{"checkout/checkout-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Collector.CreateHold(ctx, ada, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "audit"},
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "not a drill"}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = cliOn(t, clk, env, "drills")
	if code != 0 || !strings.Contains(out, drill.ID) || !strings.Contains(out, "STOPPED: stop condition: fallback failure rate 86 % > 20 % at ") ||
		!strings.Contains(out, "(first above it: checkout/checkout-1)") || strings.Contains(out, "checkout/audit") {
		t.Errorf("drills: exit %d, out %q, err %q", code, out, stderr)
	}
}

// A server older than stop conditions ignores --stop-if: the trip it made
// is released at once, and the command fails saying so.
func TestCLITripWithStopConditionsOnAServerThatIgnoresThemReleasesTheHold(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		// API 1.1.0's answer: no stops.
		_, _ = w.Write([]byte(`{"id":"h00000000000000001","selector":{"service":"checkout","breaker":"pricing"},"action":"force_open","ttl":60000000000,"reason":"drill","actor":"ada","coverage":[]}`))
	}))
	defer srv.Close()
	code, _, stderr := cli(t, map[string]string{"CBDASH_SERVER": srv.URL, "CBDASH_TOKEN": "t"},
		"trip", "checkout/pricing", "--for", "1m", "--reason", "drill", "--stop-if", "fallback-failure-rate>20%")
	mu.Lock()
	defer mu.Unlock()
	if code == 0 || !strings.Contains(stderr, "does not support stop conditions") ||
		!slices.Contains(calls, "POST /api/v1/holds/h00000000000000001/release") {
		t.Errorf("exit %d, err %q, calls %q: want the hold released and a failure", code, stderr, calls)
	}
}
