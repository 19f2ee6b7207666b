package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
)

// runningDemo is a whole demo (store, collector, dashboard, fleet with its
// agents) running in this process on a loopback port.
//
// The demo tests exercise real time on purpose: real breakers trip on a
// fault script played by real HTTP servers, so they run on a clock that
// starts at the test epoch but advances at real speed
// (clocktest.NewRunning), and they wait for what the script does with
// eventually.Within, bounded by the script's own timing.
type runningDemo struct {
	clk   *clocktest.Running
	url   string
	setup demoSetup
	db    string
	out   *logBuffer // the demo's stdout: its banner, its receiver's lines
}

// startDemo runs the demo on a running clock from the test epoch until
// the test ends, then checks that it shut down cleanly.
func startDemo(t *testing.T, db string) runningDemo {
	t.Helper()
	var o demoOptions
	o.Addr, o.DB, o.Anonymous, o.LogLevel, o.LogFormat = "127.0.0.1:0", db, true, "warn", "text"
	o.Rate = 10 // enough to fill the windows, light on a shared CI machine
	ctx, cancel := context.WithCancel(context.Background())
	type started struct {
		url string
		d   demoSetup
	}
	ready := make(chan started, 1)
	done := make(chan error, 1)
	var logs, out logBuffer
	clk := clocktest.NewRunning()
	go func() {
		done <- runDemo(ctx, o, clk, &out, &logs, func(url string, d demoSetup) { ready <- started{url, d} })
	}()
	var s started
	select {
	case s = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("demo stopped at once: %v", err)
	case <-time.After(2 * time.Minute): // a hung start, not a slow one: beside CPU hogs three demos start at once
		cancel()
		t.Fatal("demo did not start within 2m")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demo shutdown: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("demo did not shut down within 2m")
		}
		// The demo's log holds no error and no warning, and not the
		// admin's password (the banner shows it).
		for _, line := range strings.Split(logs.String(), "\n") {
			if t.Failed() && strings.Contains(line, "drill") {
				t.Logf("demo log: %s", line)
			}
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") || (s.d.admin != "" && strings.Contains(line, s.d.admin)) {
				t.Errorf("demo log: %s", line)
			}
		}
	})
	return runningDemo{clk: clk, url: s.url, setup: s.d, db: db, out: &out}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// openedAndClosed returns a breaker instance whose transitions (newest
// first) show an opening followed later by a closing.
func openedAndClosed(ts []cbdash.TransitionRecord) (string, bool) {
	opened := map[string]bool{}
	for i := len(ts) - 1; i >= 0; i-- { // oldest first
		t := ts[i]
		k := t.Service + "/" + t.Breaker + "@" + t.Instance
		switch {
		case t.From == "closed" && t.To == "open":
			opened[k] = true
		case t.To == "closed" && opened[k]:
			return k, true
		}
	}
	return "", false
}

func TestDemoBreakersOpenAndCloseWithinAMinute(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the whole demo for up to a minute")
	}
	d := startDemo(t, filepath.Join(t.TempDir(), "demo.db"))
	start := time.Now() // real time: the fault script runs on it
	var which string
	// Real time: the fault script opens and closes breakers within its
	// first minute.
	eventually.Within(t, 60*time.Second, "a breaker opened and closed again", func() bool {
		var ts []cbdash.TransitionRecord
		getJSON(t, d.url+"/api/v1/transitions?limit=1000", &ts)
		k, ok := openedAndClosed(ts)
		which = k
		return ok
	})
	t.Logf("%s opened and closed again after %v", which, time.Since(start).Round(time.Second))

	var deps []cbdash.Dependency
	getJSON(t, d.url+"/api/v1/breakers", &deps)
	if len(deps) != 8 {
		t.Errorf("%d dependencies, want 8 (checkout x3 deps, search x2, catalog x3)", len(deps))
	}
	opened := 0
	for _, dep := range deps {
		opened += dep.OpensToday
	}
	if opened == 0 {
		t.Errorf("no dependency counts an opening today: %+v", deps)
	}

	t.Run("every automatic cause appears within the first minute", func(t *testing.T) {
		want := []string{"failure_rate", "slow_call_rate", "open_elapsed", "probe_failed", "probes_succeeded"}
		var missing []string
		// Real time: the script plays every fault within its first minute
		// (counted from the start of the demo).
		if !eventually.Wait(max(0, 60*time.Second-time.Since(start)), func() bool {
			var ts []cbdash.TransitionRecord
			getJSON(t, d.url+"/api/v1/transitions?limit=5000", &ts)
			seen := map[string]bool{}
			for _, tr := range ts {
				seen[tr.Cause.Kind] = true
			}
			missing = missing[:0]
			for _, k := range want {
				if !seen[k] {
					missing = append(missing, k)
				}
			}
			return len(missing) == 0
		}) {
			t.Fatalf("after 60s no transition caused by %v", missing)
		}
	})
	t.Run("within a minute one scripted drill is STOPPED by its fallbacks' failures (pricing), one passes (inventory)", func(t *testing.T) {
		results := map[string]cbdash.HoldReport{}
		// Real time: the drills start demoDrillAfter after the demo and
		// last at most demoDrillFor.
		eventually.Within(t, demoDrillAfter+demoDrillFor+20*time.Second-time.Since(start), "the demo's drills", func() bool {
			var holds []cbdash.HoldRecord
			getJSON(t, d.url+"/api/v1/holds", &holds)
			for _, h := range holds {
				if h.Actor != "demo" {
					continue
				}
				var r cbdash.HoldReport
				getJSON(t, d.url+"/api/v1/holds/"+h.ID+"/report", &r)
				results[h.Selector.String()] = r
			}
			return len(results) == 2 && results["checkout/pricing"].Result != cbdash.DrillOngoing &&
				results["checkout/inventory"].Result != cbdash.DrillOngoing
		})
		t.Logf("demo drills after %v: pricing %s (%s), inventory %s", time.Since(start).Round(time.Second),
			results["checkout/pricing"].Result, results["checkout/pricing"].Hold.ReleaseReason, results["checkout/inventory"].Result)
		if p := results["checkout/pricing"]; p.Result != cbdash.DrillStopped || p.Hold.Breach == nil ||
			p.Hold.Breach.Condition.String() != demoDrillStop || p.Hold.TTL != demoDrillFor {
			t.Errorf("pricing drill: result %q, breach %+v: want STOPPED by %s", p.Result, p.Hold.Breach, demoDrillStop)
		}
		if r := results["checkout/inventory"]; r.Result != cbdash.DrillPassed {
			t.Errorf("inventory drill: result %q (%s), want passed", r.Result, r.Hold.ReleaseReason)
		}
	})
	t.Run("status lists the fleet", func(t *testing.T) {
		code, out, stderr := cli(t, map[string]string{"CBDASH_SERVER": d.url}, "status")
		if code != 0 || !strings.Contains(out, "checkout/payments") || !strings.Contains(out, "search/search") {
			t.Fatalf("status: exit %d, out %q, err %q", code, out, stderr)
		}
	})
	t.Run("trip and release reach every instance", func(t *testing.T) {
		env := map[string]string{"CBDASH_SERVER": d.url, "CBDASH_TOKEN": d.setup.apiToken}
		code, out, stderr := cli(t, env, "trip", "*/payments", "--for", "1m", "--reason", "demo test", "--dry-run")
		if code != 0 || !strings.Contains(out, "dry run: force open */payments") || !strings.Contains(out, "3 of 3 instance(s)") ||
			!strings.Contains(out, "nothing was changed") {
			t.Fatalf("trip --dry-run: exit %d, out %q, err %q", code, out, stderr)
		}
		code, _, stderr = cli(t, env, "trip", "checkout/payments", "--for", "25h", "--reason", "demo test")
		if code != 1 || !strings.Contains(stderr, "maximum hold duration 24h0m0s") {
			t.Fatalf("trip for 25h: exit %d, err %q; want the limit named", code, stderr)
		}
		code, out, stderr = cli(t, env, "trip", "checkout/payments", "--for", "1m", "--reason", "demo test")
		if code != 0 || strings.Count(out, "applied") != 3 || strings.Count(out, "forced_open") != 3 || !strings.Contains(out, "force open checkout/payments: hold") {
			t.Fatalf("trip: exit %d, out %q, err %q", code, out, stderr)
		}
		code, out, stderr = cli(t, env, "holds")
		if code != 0 || !strings.Contains(out, "force open") || !strings.Contains(out, "3 applied") {
			t.Fatalf("holds: exit %d, out %q, err %q", code, out, stderr)
		}
		var dep cbdash.Dependency
		getJSON(t, d.url+"/api/v1/breakers/checkout/payments", &dep)
		if dep.Held == nil || dep.Held.Reason != "demo test" || dep.Held.Actor != demoOperator {
			t.Errorf("after trip, held = %+v; want the operator's hold with its reason", dep.Held)
		}
		code, out, stderr = cli(t, env, "release", "checkout/payments", "--reason", "demo test over")
		if code != 0 || strings.Count(out, "applied") != 3 {
			t.Fatalf("release: exit %d, out %q, err %q", code, out, stderr)
		}
	})
	t.Run("unknown breaker is refused", func(t *testing.T) {
		env := map[string]string{"CBDASH_SERVER": d.url, "CBDASH_TOKEN": d.setup.apiToken}
		code, _, stderr := cli(t, env, "reset", "checkout/nosuch", "--reason", "x")
		if code != 1 || !strings.Contains(stderr, "not found") {
			t.Fatalf("reset of an unknown breaker: exit %d, err %q", code, stderr)
		}
	})
	t.Run("a bad token is refused", func(t *testing.T) {
		env := map[string]string{"CBDASH_SERVER": d.url, "CBDASH_TOKEN": "nope"}
		code, _, stderr := cli(t, env, "reset", "checkout/payments", "--reason", "x")
		if code != 1 || !strings.Contains(stderr, "--token") {
			t.Fatalf("reset with a bad token: exit %d, err %q", code, stderr)
		}
	})
	t.Run("loadgen measures the server", func(t *testing.T) {
		env := map[string]string{"CBDASH_SERVER": d.url, "CBDASH_AGENT_TOKEN": d.setup.agentToken}
		code, out, stderr := cliOn(t, d.clk, env, "loadgen", "--instances", "5", "--breakers", "3", "--duration", "2s", "--json")
		if code != 0 {
			t.Fatalf("loadgen: exit %d, err %q", code, stderr)
		}
		var res struct {
			Instances int   `json:"instances"`
			Windows   int64 `json:"windows"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Instances != 5 || res.Windows == 0 {
			t.Fatalf("loadgen result %q (%v): want 5 instances and stored window reports", out, err)
		}
	})
	t.Run("anonymous viewers cannot operate", func(t *testing.T) {
		resp, err := http.Post(d.url+"/api/v1/commands", "application/json",
			strings.NewReader(`{"service":"checkout","breaker":"payments","action":"reset"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Fatalf("anonymous POST /api/v1/commands: %d, want 401 or 403", resp.StatusCode)
		}
	})
}

// The history survives the process: after the demo stops, the database
// holds its transitions.
func TestDemoStopsCleanlyAndKeepsItsHistory(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo")
	}
	db := filepath.Join(t.TempDir(), "demo.db")
	t.Run("run", func(t *testing.T) {
		d := startDemo(t, db)
		// Real time: the script's first fault trips a breaker within
		// seconds.
		eventually.Within(t, 30*time.Second, "a transition", func() bool {
			var ts []cbdash.TransitionRecord
			getJSON(t, d.url+"/api/v1/transitions", &ts)
			return len(ts) > 0
		})
	})
	ctx := context.Background()
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts, err := st.Transitions(ctx, cbdash.TransitionQuery{})
	if err != nil || len(ts) == 0 {
		t.Fatalf("stored transitions after shutdown: %d, %v", len(ts), err)
	}
}
