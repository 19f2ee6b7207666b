package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func testSchedule(t *testing.T, id, rule string, at time.Time) cbdash.DrillSchedule {
	t.Helper()
	r, err := cbdash.ParseScheduleRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := cbdash.ParseStopCondition("fallback-failure-rate>20%")
	if err != nil {
		t.Fatal(err)
	}
	return cbdash.DrillSchedule{ID: id, CreatedAt: at, ScheduleRequest: cbdash.ScheduleRequest{Rule: r, HoldRequest: cbdash.HoldRequest{
		Selector: cbdash.Selector{Service: "checkout", Breaker: "pricing"}, Action: protocol.ActionForceOpen,
		TTL: 10 * time.Minute, Reason: "weekly drill", Actor: "otto", StopIf: []cbdash.StopCondition{stop},
		Steps: []cbdash.HoldStep{{Share: 5, For: time.Minute}, {Share: 100, For: 9 * time.Minute}}}}}
}

// A schedule is stored with its hold request and rule, each due time is
// taken once whichever store handle (collector) claims it, deleting it
// records who and why, and neither it nor its runs can be deleted from
// the database.
func TestSchedulesAreStoredAndEachDueTimeIsTakenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openStore(t, store.Options{})
	d := testSchedule(t, "s01", "every tue,thu 10:00", t0)
	if err := s.CreateSchedule(ctx, d); err != nil {
		t.Fatalf("CreateSchedule: %v", err)
	}
	if err := s.CreateSchedule(ctx, d); !errors.Is(err, cbdash.ErrConflict) {
		t.Fatalf("CreateSchedule twice = %v, want ErrConflict", err)
	}
	bad := d
	bad.ID, bad.Rule = "s02", cbdash.ScheduleRule{}
	if err := s.CreateSchedule(ctx, bad); !errors.Is(err, cbdash.ErrInvalid) {
		t.Fatalf("CreateSchedule without a rule = %v, want ErrInvalid", err)
	}
	got, err := s.Schedule(ctx, "s01")
	if err != nil {
		t.Fatal(err)
	}
	if got.Rule.String() != "every tue,thu 10:00" || got.TTL != 10*time.Minute || len(got.StopIf) != 1 || len(got.Steps) != 2 ||
		got.Actor != "otto" || !got.CreatedAt.Equal(t0) || len(got.Runs) != 0 {
		t.Fatalf("Schedule = %+v", got)
	}

	// Two handles on one database claim the same due time at once: one wins.
	other, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	due := t0.Add(22 * time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*store.Store{s, other} {
		wg.Go(func() {
			errs[i] = st.ClaimScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: "s01", Due: due, At: due, Result: cbdash.RunClaimed})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cbdash.ErrConflict):
			t.Fatalf("a claim failed with %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d claims of one due time succeeded, want 1 (%v)", won, errs)
	}
	if err := s.ClaimScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: "nope", Due: due, At: due, Result: cbdash.RunClaimed}); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("a claim of an unknown schedule = %v, want ErrNotFound", err)
	}
	if err := s.FinishScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: "s01", Due: due, Result: cbdash.RunStarted, HoldID: "h01"}); err != nil {
		t.Fatalf("FinishScheduleRun: %v", err)
	}
	if err := s.FinishScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: "s01", Due: due.Add(time.Hour), Result: cbdash.RunStarted}); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("finishing an unclaimed run = %v, want ErrNotFound", err)
	}
	later := due.Add(48 * time.Hour)
	if err := other.ClaimScheduleRun(ctx, cbdash.ScheduleRun{ScheduleID: "s01", Due: later, At: later, Result: cbdash.RunSkipped,
		Reason: "missed while the server was down"}); err != nil {
		t.Fatal(err)
	}
	list, err := s.Schedules(ctx, cbdash.ScheduleQuery{})
	if err != nil || len(list) != 1 || len(list[0].Runs) != 2 {
		t.Fatalf("Schedules = %+v, %v", list, err)
	}
	if r := list[0].Runs; !r[0].Due.Equal(later) || r[0].Result != cbdash.RunSkipped || r[1].HoldID != "h01" || r[1].Result != cbdash.RunStarted {
		t.Fatalf("runs %+v, want the skipped one then the started one", r)
	}

	deleted, err := s.DeleteSchedule(ctx, "s01", due, "rita", "season over")
	if err != nil || deleted.DeletedBy != "rita" || deleted.DeleteReason != "season over" || !deleted.DeletedAt.Equal(due) {
		t.Fatalf("DeleteSchedule = %+v, %v", deleted, err)
	}
	if _, err := s.DeleteSchedule(ctx, "s01", due, "rita", "again"); !errors.Is(err, cbdash.ErrConflict) {
		t.Fatalf("DeleteSchedule twice = %v, want ErrConflict", err)
	}
	if _, err := s.DeleteSchedule(ctx, "nope", due, "rita", "x"); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("DeleteSchedule of an unknown id = %v, want ErrNotFound", err)
	}
	if list, err := s.Schedules(ctx, cbdash.ScheduleQuery{}); err != nil || len(list) != 0 {
		t.Fatalf("Schedules without deleted = %+v, %v", list, err)
	}
	if list, err := other.Schedules(ctx, cbdash.ScheduleQuery{Deleted: true}); err != nil || len(list) != 1 || list[0].DeletedBy != "rita" {
		t.Fatalf("Schedules with deleted = %+v, %v", list, err)
	}
	for _, q := range []string{"DELETE FROM drill_schedules", "DELETE FROM drill_schedule_runs"} {
		if _, err := rawDB(t, path).Exec(q); err == nil {
			t.Errorf("%s succeeded; schedules are part of the audit log", q)
		}
	}
}
