package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// `cbdash drill schedule` stores a weekly drill, `drill schedules` lists
// it with its next run, the server starts it at its due time (on the
// virtual clock) by "schedule <id>" and the list says so, and `drill
// unschedule` deletes it with a reason (kept, listed with --deleted).
func TestCLIDrillScheduleRunsAtItsTimeAndIsListedAndUnscheduled(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk})
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 20, Successes: 20}})
	ctx := t.Context()
	env := operatorEnv(t, st)
	due := clk.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
	every := "day " + due.Format("15:04")

	code, _, stderr := cliOn(t, clk, env, "drill", "schedule", "checkout/payments", "--for", "5m", "--reason", "weekly drill")
	if code == 0 || !strings.Contains(stderr, "--at TIME") {
		t.Errorf("schedule without a rule: exit %d, err %q", code, stderr)
	}
	code, out, stderr := cliOn(t, clk, env, "drill", "schedule", "checkout/payments", "--every", every, "--for", "5m",
		"--reason", "weekly drill", "--stop-if", "fallback-failure-rate>20%")
	if code != 0 || !strings.Contains(out, "scheduled drill s") || !strings.Contains(out, "next run "+due.Format("Mon 2006-01-02 15:04 UTC")) {
		t.Fatalf("schedule: exit %d, out %q, err %q", code, out, stderr)
	}
	ds, err := st.Collector.Schedules(ctx, false)
	if err != nil || len(ds) != 1 || ds[0].Actor != "ada" || len(ds[0].StopIf) != 1 {
		t.Fatalf("stored schedules %+v, %v", ds, err)
	}
	id := ds[0].ID
	code, out, _ = cliOn(t, clk, env, "drill", "schedules")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "every day "+due.Format("15:04")) || !strings.Contains(out, "never") {
		t.Errorf("schedules before the run: exit %d, out %q", code, out)
	}

	clk.Advance(due.Sub(clk.Now()) + time.Second)
	var hold cbdash.HoldRecord
	// Started: its run recorded as started (the hold is stored a moment
	// before the run says so).
	eventually.True(t, "the scheduled drill started", func() bool {
		ds, err := st.Collector.Schedules(ctx, false)
		if err != nil || len(ds) != 1 || len(ds[0].Runs) == 0 || ds[0].Runs[0].Result != cbdash.RunStarted {
			return false
		}
		hs, err := st.Store.Holds(ctx, cbdash.HoldQuery{})
		if err != nil || len(hs) == 0 {
			return false
		}
		hold = hs[0]
		return hold.ID == ds[0].Runs[0].HoldID
	})
	if hold.Actor != "schedule "+id || !hold.Until.Equal(due.Add(5*time.Minute)) || len(hold.Stops) != 1 {
		t.Errorf("the scheduled drill's hold %+v", hold)
	}
	if code, out, _ = cliOn(t, clk, env, "drills"); code != 0 || !strings.Contains(out, hold.ID) || !strings.Contains(out, "started as hold "+hold.ID) {
		t.Errorf("drills lists the drill and its schedule: exit %d, out %q", code, out)
	}
	code, out, _ = cliOn(t, clk, env, "drill", "schedules")
	if code != 0 || !strings.Contains(out, "started as hold "+hold.ID) || !strings.Contains(out, due.AddDate(0, 0, 1).Format("Mon 2006-01-02 15:04 UTC")) {
		t.Errorf("schedules after the run: exit %d, out %q", code, out)
	}

	if code, _, stderr = cliOn(t, clk, env, "drill", "unschedule", id); code == 0 || !strings.Contains(stderr, "--reason is required") {
		t.Errorf("unschedule without a reason: exit %d, err %q", code, stderr)
	}
	code, out, stderr = cliOn(t, clk, env, "drill", "unschedule", id, "--reason", "season over")
	if code != 0 || !strings.Contains(out, "deleted drill schedule "+id) || !strings.Contains(out, "by ada: season over") {
		t.Errorf("unschedule: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, out, _ = cliOn(t, clk, env, "drill", "schedules"); code != 0 || strings.Contains(out, id) {
		t.Errorf("schedules after unschedule: exit %d, out %q", code, out)
	}
	if code, out, _ = cliOn(t, clk, env, "drill", "schedules", "--deleted"); code != 0 || !strings.Contains(out, "by ada: season over") {
		t.Errorf("schedules --deleted: exit %d, out %q", code, out)
	}
}

// The server is down at two due times: on restart the drill whose window
// is not over yet starts for what is left of it (it ends when it would
// have), and the one whose window ended while down is recorded as
// skipped, missed while the server was down.
func TestScheduledDrillsAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	first := stacktest.Start(t, stacktest.Options{Clock: clk})
	ctx := t.Context()
	ada := cbdash.Actor{Name: "ada", Role: cbdash.RoleOperator, Kind: cbdash.ActorUser}
	now := clk.Now().UTC().Truncate(time.Minute)
	late, missed := now.Add(30*time.Minute), now.Add(20*time.Minute)
	schedule := func(rule string, ttl time.Duration) cbdash.DrillSchedule {
		t.Helper()
		r, err := cbdash.ParseScheduleRule(rule)
		if err != nil {
			t.Fatal(err)
		}
		d, err := first.Collector.CreateSchedule(ctx, ada, cbdash.ScheduleRequest{Rule: r, HoldRequest: cbdash.HoldRequest{
			Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"}, Action: protocol.ActionForceOpen, TTL: ttl,
			Reason: "drill", StopIf: []cbdash.StopCondition{{Metric: cbdash.StopFallbackFailureRate, Above: 20}}}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	daily := schedule("every day "+late.Format("15:04"), 10*time.Minute)
	once := schedule("at "+missed.Format(time.RFC3339), 5*time.Minute)
	first.Stop()
	clk.Advance(late.Add(2 * time.Minute).Sub(clk.Now())) // down at both due times
	again := stacktest.Start(t, stacktest.Options{Clock: clk, Path: first.Path})
	clk.Advance(time.Second)
	var runs []cbdash.ScheduleRun
	eventually.True(t, "both due times handled after the restart", func() bool {
		d, err1 := again.Collector.Schedule(ctx, daily.ID)
		o, err2 := again.Collector.Schedule(ctx, once.ID)
		if err1 != nil || err2 != nil || len(d.Runs) == 0 || len(o.Runs) == 0 || d.Runs[0].Result == cbdash.RunClaimed {
			clk.Advance(time.Second)
			return false
		}
		runs = []cbdash.ScheduleRun{d.Runs[0], o.Runs[0]}
		return true
	})
	if r := runs[1]; r.Result != cbdash.RunSkipped || r.Reason != "missed while the server was down" || !r.Due.Equal(missed) {
		t.Errorf("the one-off run %+v, want skipped as missed", r)
	}
	r := runs[0]
	if r.Result != cbdash.RunStarted || !r.Due.Equal(late) {
		t.Fatalf("the daily run %+v, want started late", r)
	}
	h, err := again.Collector.Hold(ctx, r.HoldID)
	if err != nil || !h.Until.Equal(late.Add(10*time.Minute)) || h.Actor != "schedule "+daily.ID {
		t.Fatalf("the late drill %+v (%v), want it by the schedule, ending at %v", h, err, late.Add(10*time.Minute))
	}
}

// A run another collector claimed and never finished (it stopped) is
// taken over by this server once the lease has passed: the drill starts
// once, and `cbdash drill schedules` and `cbdash drills` say the run was
// taken over, from whom.
func TestCLIDrillSchedulesSayARunWasTakenOver(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk})
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 20, Successes: 20}})
	ctx := t.Context()
	env := operatorEnv(t, st)
	due := clk.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
	if code, out, stderr := cliOn(t, clk, env, "drill", "schedule", "checkout/payments", "--at", due.Format(time.RFC3339), "--for", "5m",
		"--reason", "one drill"); code != 0 {
		t.Fatalf("schedule: exit %d, out %q, err %q", code, out, stderr)
	}
	ds, err := st.Collector.Schedules(ctx, false)
	if err != nil || len(ds) != 1 {
		t.Fatalf("schedules %+v, %v", ds, err)
	}
	id := ds[0].ID
	// Another collector claims the run at its due time and stops there.
	if err := st.Store.ClaimScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: id, Due: due, At: due, Result: cbdash.RunClaimed,
		ClaimedBy: "collector-b"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(due.Sub(clk.Now()) + time.Second)
	if code, out, _ := cliOn(t, clk, env, "drill", "schedules"); code != 0 || !strings.Contains(out, "claimed (claimed by collector-b)") {
		t.Errorf("schedules within the lease: exit %d, out %q", code, out)
	}
	var run cbdash.ScheduleRun
	eventually.True(t, "the run taken over and started", func() bool {
		d, err := st.Collector.Schedule(ctx, id)
		if err != nil || len(d.Runs) == 0 || d.Runs[0].Result != cbdash.RunStarted {
			clk.Advance(time.Second)
			return false
		}
		run = d.Runs[0]
		return true
	})
	if run.TakenOverFrom != "collector-b" || run.At.Sub(due) < 30*time.Second {
		t.Fatalf("run %+v, want taken over from collector-b after the 30 s lease", run)
	}
	hs, err := st.Store.Holds(ctx, cbdash.HoldQuery{})
	if err != nil || len(hs) != 1 || hs[0].ID != run.HoldID {
		t.Fatalf("holds %+v (%v), want the one drill %s", hs, err, run.HoldID)
	}
	want := "started as hold " + run.HoldID + " (taken over by " + run.ClaimedBy + " from collector-b, which stopped before finishing it)"
	for _, args := range [][]string{{"drill", "schedules"}, {"drills"}} {
		if code, out, _ := cliOn(t, clk, env, args...); code != 0 || !strings.Contains(out, want) {
			t.Errorf("%v: exit %d, out %q, want %q", args, code, out, want)
		}
	}
}
