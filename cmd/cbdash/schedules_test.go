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
	u, err := st.Store.CreateUser(ctx, "ada", cbdash.RoleOperator, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Store.CreateUserToken(ctx, u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CBDASH_SERVER": st.URL(), "CBDASH_TOKEN": token}
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
	eventually.True(t, "the scheduled drill started", func() bool {
		hs, err := st.Store.Holds(ctx, cbdash.HoldQuery{})
		if err != nil || len(hs) == 0 {
			return false
		}
		hold = hs[0]
		return true
	})
	if hold.Actor != "schedule "+id || !hold.Until.Equal(due.Add(5*time.Minute)) || len(hold.Stops) != 1 {
		t.Errorf("the scheduled drill's hold %+v", hold)
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
