package holds

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// schedSim is a collector's scheduling on a virtual clock: a store, a
// Manager over a fleet of two "pricing" instances and a Scheduler.
type schedSim struct {
	clk *breakertest.Clock
	st  *store.Store
	m   *Manager
	s   *Scheduler
}

// newSchedSim starts a collector on the store at path (opened anew: a
// restart keeps nothing but the store) and clk.
func newSchedSim(t *testing.T, clk *breakertest.Clock, path string) *schedSim {
	t.Helper()
	return newNamedSchedSim(t, clk, path, "c1")
}

// newNamedSchedSim is newSchedSim of a collector named node.
func newNamedSchedSim(t *testing.T, clk *breakertest.Clock, path, node string) *schedSim {
	t.Helper()
	st := storetest.OpenFile(t, path, store.Options{Clock: clk})
	f := &fleet{insts: make(map[Key]Instance)}
	m := New(Config{Instances: f, Store: st, Events: nopEvents{}, Cluster: nopCluster{}, Now: clk.Now, CommandDelivery: time.Minute})
	if err := m.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.connect(st, Key{"pricing", "p1"})
	f.connect(st, Key{"pricing", "p2"})
	return &schedSim{clk: clk, st: st, m: m, s: NewScheduler(st, m, node)}
}

// scheduleReq is a drill of pricing/db for 10 minutes with a stop
// condition, on rule.
func scheduleReq(t *testing.T, rule string) cbdash.ScheduleRequest {
	t.Helper()
	r, err := cbdash.ParseScheduleRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := cbdash.ParseStopCondition("fallback-failure-rate>20%")
	if err != nil {
		t.Fatal(err)
	}
	return cbdash.ScheduleRequest{Rule: r, HoldRequest: cbdash.HoldRequest{Selector: cbdash.Selector{Service: "pricing", Breaker: "db"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "weekly drill", Actor: "otto",
		StopIf: []cbdash.StopCondition{stop}}}
}

// nextWeekday is the first time at hh:00 UTC on weekday wd strictly after t.
func nextWeekday(t time.Time, wd time.Weekday, hh int) time.Time {
	d := time.Date(t.Year(), t.Month(), t.Day(), hh, 0, 0, 0, time.UTC)
	for d.Weekday() != wd || !d.After(t) {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

func (s *schedSim) schedule(t *testing.T, rule string) cbdash.DrillSchedule {
	t.Helper()
	d, err := s.s.Create(context.Background(), scheduleReq(t, rule))
	if err != nil {
		t.Fatalf("Create schedule %q: %v", rule, err)
	}
	return d
}

func (s *schedSim) advanceTo(t time.Time) { s.clk.Advance(t.Sub(s.clk.Now())) }

func (s *schedSim) lastRun(t *testing.T, id string) cbdash.ScheduleRun {
	t.Helper()
	d, err := s.s.Schedule(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) == 0 {
		t.Fatalf("schedule %s has no run", id)
	}
	return d.Runs[0]
}

// A weekly schedule starts its drill at its due time, as a manual drill
// (stop conditions, the audit log's actor, the end it would have), and
// lists the next week's as its next run; nothing runs before its time.
func TestAScheduledDrillStartsAtItsDueTimeAsAManualDrill(t *testing.T) {
	clk := clocktest.Virtual()
	sim := newSchedSim(t, clk, storetest.Path(t))
	ctx := context.Background()
	due := nextWeekday(clk.Now(), time.Tuesday, 10)
	d := sim.schedule(t, "every tue 10:00")
	if !d.NextRun.Equal(due) || len(d.Runs) != 0 {
		t.Fatalf("new schedule: next run %v, runs %+v; want %v and none", d.NextRun, d.Runs, due)
	}
	sim.advanceTo(due.Add(-time.Second))
	sim.s.Tick(ctx)
	if hs, _ := sim.m.Holds(ctx, true, 0); len(hs) != 0 {
		t.Fatalf("a drill started before its time: %+v", hs)
	}
	sim.advanceTo(due.Add(300 * time.Millisecond))
	sim.s.Tick(ctx)
	sim.s.Tick(ctx) // a second tick in the same due time starts nothing more
	run := sim.lastRun(t, d.ID)
	if run.Result != cbdash.RunStarted || run.HoldID == "" || !run.Due.Equal(due) {
		t.Fatalf("run %+v, want started at %v", run, due)
	}
	h, err := sim.m.Hold(ctx, run.HoldID)
	if err != nil {
		t.Fatal(err)
	}
	if h.Actor != ScheduleActor(d.ID) || !h.Until.Equal(due.Add(10*time.Minute)) || len(h.Stops) != 1 || len(h.Coverage) != 2 ||
		!strings.Contains(h.Reason, "weekly drill") {
		t.Fatalf("the scheduled drill's hold %+v", h)
	}
	if hs, _ := sim.m.Holds(ctx, false, 0); len(hs) != 1 {
		t.Fatalf("%d holds, want the one drill", len(hs))
	}
	list, err := sim.s.Schedules(ctx, false)
	if err != nil || len(list) != 1 || !list[0].NextRun.Equal(due.AddDate(0, 0, 7)) || len(list[0].Runs) != 1 {
		t.Fatalf("list %+v, %v; want the next run a week on and the last run", list, err)
	}
}

// A due time at which pre-flight refuses the drill (another drill covers
// the target) is recorded as skipped with pre-flight's reason, and no
// hold starts; a one-off schedule then has no next run.
func TestAScheduledDrillPreflightRefusesIsSkippedWithTheReason(t *testing.T) {
	clk := clocktest.Virtual()
	sim := newSchedSim(t, clk, storetest.Path(t))
	ctx := context.Background()
	at := clk.Now().Add(time.Hour).Truncate(time.Minute)
	d := sim.schedule(t, "at "+at.Format(time.RFC3339))
	manual := scheduleReq(t, "every day 00:00").HoldRequest
	manual.TTL = 2 * time.Hour
	other, err := sim.m.Create(ctx, manual)
	if err != nil {
		t.Fatal(err)
	}
	sim.advanceTo(at)
	sim.s.Tick(ctx)
	run := sim.lastRun(t, d.ID)
	if run.Result != cbdash.RunSkipped || run.HoldID != "" || !strings.Contains(run.Reason, "pre-flight") ||
		!strings.Contains(run.Reason, "drill "+other.ID) {
		t.Fatalf("run %+v, want skipped because drill %s covers it", run, other.ID)
	}
	if hs, _ := sim.m.Holds(ctx, false, 0); len(hs) != 1 {
		t.Fatalf("%d holds, want only the manual drill", len(hs))
	}
	if got, _ := sim.s.Schedule(ctx, d.ID); !got.NextRun.IsZero() {
		t.Fatalf("a one-off schedule run once has next run %v", got.NextRun)
	}
}

// Schedules survive a restart: a due time that passed while the server
// was down by more than the drill's duration is recorded as skipped
// (missed); one that passed by less starts on restart and ends when it
// would have.
func TestScheduledDrillsAfterARestartRunLateOrAreMissed(t *testing.T) {
	clk := clocktest.Virtual()
	path := storetest.Path(t)
	ctx := context.Background()
	first := newSchedSim(t, clk, path)
	tue := nextWeekday(clk.Now(), time.Tuesday, 10)
	wed := tue.AddDate(0, 0, 1)
	d := first.schedule(t, "every tue,wed 10:00")
	if err := first.st.Close(); err != nil { // the server stops
		t.Fatal(err)
	}
	first.advanceTo(wed.Add(4 * time.Minute)) // Tuesday's drill would have ended; Wednesday's has 6 minutes to go
	again := newSchedSim(t, clk, path)
	again.s.Tick(ctx)
	got, err := again.s.Schedule(ctx, d.ID)
	if err != nil || len(got.Runs) != 2 {
		t.Fatalf("after the restart: %+v, %v; want two runs", got, err)
	}
	if r := got.Runs[1]; !r.Due.Equal(tue) || r.Result != cbdash.RunSkipped || r.Reason != MissedReason {
		t.Errorf("Tuesday's run %+v, want skipped: %s", r, MissedReason)
	}
	r := got.Runs[0]
	if !r.Due.Equal(wed) || r.Result != cbdash.RunStarted {
		t.Fatalf("Wednesday's run %+v, want started late", r)
	}
	h, err := again.m.Hold(ctx, r.HoldID)
	if err != nil || !h.Until.Equal(wed.Add(10*time.Minute)) || h.TTL != 6*time.Minute {
		t.Fatalf("the late drill %+v (%v), want it to end at %v", h, err, wed.Add(10*time.Minute))
	}
	if !got.NextRun.Equal(tue.AddDate(0, 0, 7)) {
		t.Errorf("next run %v, want next Tuesday", got.NextRun)
	}
}

// With two collectors on one database ticking at the same due time, the
// drill starts once: on a SQLite file, and on PostgreSQL (a schema of its
// own in CBDASH_TEST_POSTGRES; skipped without it), where collectors of a
// cluster share one.
func TestTwoCollectorsStartAScheduledDrillOnce(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cbdash.db")
			if backend == "postgres" {
				if os.Getenv(pgtest.EnvDSN) == "" {
					t.Skipf("%s is not set", pgtest.EnvDSN)
				}
				path = storetest.Postgres(t)
			}
			twoCollectorsOnce(t, path)
		})
	}
}

func twoCollectorsOnce(t *testing.T, path string) {
	clk := clocktest.Virtual()
	ctx := context.Background()
	a, b := newSchedSim(t, clk, path), newSchedSim(t, clk, path)
	due := nextWeekday(clk.Now(), time.Thursday, 10)
	d := a.schedule(t, "every thu 10:00")
	a.advanceTo(due)
	var wg sync.WaitGroup
	for _, sim := range []*schedSim{a, b} {
		wg.Go(func() { sim.s.Tick(ctx) })
	}
	wg.Wait()
	hs, err := a.st.Holds(ctx, cbdash.HoldQuery{})
	if err != nil || len(hs) != 1 {
		t.Fatalf("%d holds (%v), want the drill once", len(hs), err)
	}
	got, err := b.s.Schedule(ctx, d.ID)
	if err != nil || len(got.Runs) != 1 || got.Runs[0].HoldID != hs[0].ID {
		t.Fatalf("runs %+v (%v), want one, started as %s", got.Runs, err, hs[0].ID)
	}
}

// Creating a schedule checks it as a hold, and more: force_open only, a
// rule, a one-off time in the future; deleting needs a reason and stops
// the runs.
func TestSchedulesAreCheckedAndDeletedWithAReason(t *testing.T) {
	clk := clocktest.Virtual()
	sim := newSchedSim(t, clk, storetest.Path(t))
	ctx := context.Background()
	for name, mod := range map[string]func(*cbdash.ScheduleRequest){
		"force closed":   func(r *cbdash.ScheduleRequest) { r.Action = protocol.ActionForceClosed },
		"no rule":        func(r *cbdash.ScheduleRequest) { r.Rule = cbdash.ScheduleRule{} },
		"no reason":      func(r *cbdash.ScheduleRequest) { r.Reason = "" },
		"in the past":    func(r *cbdash.ScheduleRequest) { r.Rule = cbdash.ScheduleRule{At: clk.Now().Add(-time.Minute)} },
		"unknown drop":   func(r *cbdash.ScheduleRequest) { r.DropStops, r.DropReason = []string{"p99>1ms"}, "x" },
		"too long a ttl": func(r *cbdash.ScheduleRequest) { r.TTL = 48 * time.Hour },
	} {
		req := scheduleReq(t, "every mon 10:00")
		mod(&req)
		if _, err := sim.s.Create(ctx, req); err == nil {
			t.Errorf("%s: created", name)
		}
	}
	d := sim.schedule(t, "every day 10:00")
	if _, err := sim.s.Delete(ctx, d.ID, "rita", " "); err == nil {
		t.Fatal("deleted without a reason")
	}
	del, err := sim.s.Delete(ctx, d.ID, "rita", "season over")
	if err != nil || del.DeletedBy != "rita" || !del.NextRun.IsZero() {
		t.Fatalf("Delete = %+v, %v", del, err)
	}
	sim.advanceTo(clk.Now().Add(48 * time.Hour))
	sim.s.Tick(ctx)
	if got, _ := sim.s.Schedule(ctx, d.ID); len(got.Runs) != 0 {
		t.Fatalf("a deleted schedule ran: %+v", got.Runs)
	}
}

// A collector that stops after claiming a run and before finishing it
// (before the drill started, or after its hold was stored) leaves the run
// claimed: within the lease nobody touches it; after it, of two other
// collectors ticking at once one takes it over, and the drill is started
// once: a new hold when the stopped one made none, else the stopped
// one's hold is recorded as the run's. On SQLite and on PostgreSQL
// (skipped without CBDASH_TEST_POSTGRES).
func TestAClaimedRunWhoseCollectorStoppedIsTakenOverOnce(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, stage := range []string{"claimed", "created"} {
			t.Run(backend+"/stopped after "+stage, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cbdash.db")
				if backend == "postgres" {
					if os.Getenv(pgtest.EnvDSN) == "" {
						t.Skipf("%s is not set", pgtest.EnvDSN)
					}
					path = storetest.Postgres(t)
				}
				takenOverOnce(t, path, stage)
			})
		}
	}
}

func takenOverOnce(t *testing.T, path, stage string) {
	clk := clocktest.Virtual()
	ctx := context.Background()
	a := newNamedSchedSim(t, clk, path, "a")
	b, c := newNamedSchedSim(t, clk, path, "b"), newNamedSchedSim(t, clk, path, "c")
	due := nextWeekday(clk.Now(), time.Thursday, 10)
	d := a.schedule(t, "every thu 10:00")
	a.advanceTo(due)
	a.s.stopAt = func(s string) bool { return s == stage }
	a.s.Tick(ctx) // a claims the run and stops: it ticks no more
	run := a.lastRun(t, d.ID)
	if run.Result != cbdash.RunClaimed || run.ClaimedBy != "a" {
		t.Fatalf("after a stopped: run %+v, want claimed by a", run)
	}
	holdsOf := func() []cbdash.HoldRecord {
		t.Helper()
		hs, err := b.st.Holds(ctx, cbdash.HoldQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	before := holdsOf()

	a.advanceTo(due.Add(ScheduleLease - time.Second)) // within the lease
	b.s.Tick(ctx)
	if r := b.lastRun(t, d.ID); r.Result != cbdash.RunClaimed || r.ClaimedBy != "a" || len(holdsOf()) != len(before) {
		t.Fatalf("within the lease: run %+v, %d holds; want a's claim untouched", r, len(holdsOf()))
	}

	a.advanceTo(due.Add(ScheduleLease + time.Second))
	var wg sync.WaitGroup
	for _, sim := range []*schedSim{b, c} {
		wg.Go(func() { sim.s.Tick(ctx) })
	}
	wg.Wait()
	b.s.Tick(ctx)
	c.s.Tick(ctx) // ticks after the takeover change nothing
	hs := holdsOf()
	if len(hs) != 1 {
		t.Fatalf("%d holds, want the drill once", len(hs))
	}
	r := b.lastRun(t, d.ID)
	if r.Result != cbdash.RunStarted || r.HoldID != hs[0].ID || r.TakenOverFrom != "a" || (r.ClaimedBy != "b" && r.ClaimedBy != "c") {
		t.Fatalf("run %+v, want started as %s, taken over from a by b or c", r, hs[0].ID)
	}
	if stage == "created" && len(before) != 1 {
		t.Fatalf("a stopped after creating its hold but %d holds were stored", len(before))
	}
	if stage == "created" && hs[0].ID != before[0].ID {
		t.Errorf("the run was started again as %s; a's hold %s was not found", hs[0].ID, before[0].ID)
	}
	if !hs[0].Until.Equal(due.Add(10*time.Minute)) || hs[0].Actor != ScheduleActor(d.ID) {
		t.Errorf("the drill %+v, want it to end at %v", hs[0], due.Add(10*time.Minute))
	}
	if want := "started as hold " + hs[0].ID + " (taken over by " + r.ClaimedBy + " from a, which stopped before finishing it)"; !strings.Contains(r.Text(), want) {
		t.Errorf("run text %q, want %q", r.Text(), want)
	}
}
