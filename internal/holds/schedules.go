package holds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Scheduled drills. A Scheduler keeps no state of its own: the schedules
// and their runs are the store's, so they survive a restart, and every
// collector of a cluster runs a Scheduler over the same store. At every
// Tick it reads the live schedules and, for each due time that has come
// since a schedule's last run (or its creation), claims the run in the
// store (one row per schedule and due time: of several collectors only
// the one whose claim succeeds goes on), then:
//
//   - a due time whose drill would have ended already (due + duration at
//     or before now: the server was down, or no collector ticked) is
//     recorded as skipped, "missed while the server was down";
//   - otherwise pre-flight runs; a refusal is recorded as skipped with
//     its reasons;
//   - otherwise the drill starts as a manual drill would (Manager.Create:
//     stop conditions, steps, reports and the audit log all apply), by
//     "schedule <id>", and ends when it would have had it started on
//     time (due + duration): one that starts late, after a restart, is
//     shorter by as much.
//
// A claim is a lease: a run still claimed ScheduleLease after its claim
// (the collector that claimed it stopped before it started the drill or
// recorded how it went) is taken over by the next collector to tick
// (Store.TakeOverScheduleRun: one winner), which first looks for the
// hold the stopped collector may have created for that run (its actor
// "schedule <id>", ending at due + duration) and records that one as the
// run's drill; only when there is none does it go on as above. So a run
// starts at most once, unless a collector stalls for longer than the
// lease between its claim and its hold's creation (it then finds its
// claim taken when it records the run, and logs it).

// MissedReason is the reason a run is skipped when its drill would have
// ended before any collector got to it.
const MissedReason = "missed while the server was down"

// ScheduleLease is how long a claimed run may stay unfinished before
// another collector takes it over (its claimer stopped): far more than
// pre-flight and a hold's creation take.
const ScheduleLease = 30 * time.Second

// ScheduleStore is what a Scheduler reads and writes (the store's).
type ScheduleStore interface {
	CreateSchedule(ctx context.Context, d cbdash.DrillSchedule) error
	DeleteSchedule(ctx context.Context, id string, at time.Time, by, reason string) (cbdash.DrillSchedule, error)
	Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error)
	Schedules(ctx context.Context, q cbdash.ScheduleQuery) ([]cbdash.DrillSchedule, error)
	ClaimScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error
	TakeOverScheduleRun(ctx context.Context, r cbdash.ScheduleRun, staleBefore time.Time) (cbdash.ScheduleRun, error)
	FinishScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error
	// Holds finds the hold a stopped collector created for a run it
	// claimed.
	Holds(ctx context.Context, q cbdash.HoldQuery) ([]cbdash.HoldRecord, error)
}

// Scheduler runs scheduled drills through a Manager. Create it with
// NewScheduler; its methods are safe for concurrent use (Tick is meant to
// be called from one loop).
type Scheduler struct {
	store ScheduleStore
	m     *Manager
	log   *slog.Logger
	node  string // the collector's name in the runs it claims
	// stopAt, in tests, stops the Scheduler at a stage of a run
	// ("claimed", "created") as a collector that dies there would.
	stopAt func(stage string) bool
}

// NewScheduler returns a Scheduler of the schedules in st that starts
// drills with m, on m's clock; node names this collector in the runs it
// claims (the cluster's node id).
func NewScheduler(st ScheduleStore, m *Manager, node string) *Scheduler {
	return &Scheduler{store: st, m: m, log: m.log, node: node}
}

// errStopped is a run's stage at which a test stopped the Scheduler.
var errStopped = errors.New("holds: scheduler stopped (test)")

func (s *Scheduler) stopped(stage string) bool { return s.stopAt != nil && s.stopAt(stage) }

// ScheduleActor is the actor of the holds schedule id starts.
func ScheduleActor(id string) string { return "schedule " + id }

// Create stores a schedule of req (req.Actor is who scheduled it).
// Errors: cbdash.ErrInvalid naming the bad field (as a hold's, with the
// rule; a stop condition to drop that is not a server default; a one-off
// time not in the future), or the store's.
func (s *Scheduler) Create(ctx context.Context, req cbdash.ScheduleRequest) (cbdash.DrillSchedule, error) {
	if err := req.Validate(s.m.cfg.MaxHold); err != nil {
		return cbdash.DrillSchedule{}, err
	}
	if _, err := cbdash.EffectiveStops(s.m.cfg.DefaultStops, req.DropStops, req.StopIf); err != nil {
		return cbdash.DrillSchedule{}, err
	}
	now := s.m.now().UTC()
	if req.Rule.Once() && !req.Rule.At.After(now) {
		return cbdash.DrillSchedule{}, fmt.Errorf("%w: schedule rule: %s is not in the future", cbdash.ErrInvalid, req.Rule)
	}
	d := cbdash.DrillSchedule{ID: "s" + strings.TrimPrefix(s.m.newHoldID(now), "h"), ScheduleRequest: req, CreatedAt: now}
	if err := s.store.CreateSchedule(ctx, d); err != nil {
		return cbdash.DrillSchedule{}, fmt.Errorf("record schedule: %w", err)
	}
	return s.Schedule(ctx, d.ID)
}

// Delete ends schedule id: it runs no more (a drill it started goes on:
// release that hold to end it). actor and reason are kept with it.
// Errors: cbdash.ErrInvalid for a missing or bad reason, cbdash.ErrNotFound,
// cbdash.ErrConflict when already deleted, or the store's.
func (s *Scheduler) Delete(ctx context.Context, id, actor, reason string) (cbdash.DrillSchedule, error) {
	if strings.TrimSpace(reason) == "" {
		return cbdash.DrillSchedule{}, fmt.Errorf("%w: reason is required: it goes into the audit log", cbdash.ErrInvalid)
	}
	if len(reason) > 1000 {
		return cbdash.DrillSchedule{}, fmt.Errorf("%w: reason is longer than 1000 bytes", cbdash.ErrInvalid)
	}
	if err := cbdash.CheckText("reason", reason, false); err != nil {
		return cbdash.DrillSchedule{}, err
	}
	d, err := s.store.DeleteSchedule(ctx, id, s.m.now().UTC(), actor, reason)
	if err != nil {
		return cbdash.DrillSchedule{}, err
	}
	return withNext(d), nil
}

// Schedule returns one schedule with its last runs and next run. Errors:
// cbdash.ErrNotFound or the store's.
func (s *Scheduler) Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error) {
	d, err := s.store.Schedule(ctx, id)
	if err != nil {
		return cbdash.DrillSchedule{}, err
	}
	return withNext(d), nil
}

// Schedules lists schedules (deleted ones too when deleted is set),
// newest first, each with its last 5 runs and its next run. Errors: the
// store's.
func (s *Scheduler) Schedules(ctx context.Context, deleted bool) ([]cbdash.DrillSchedule, error) {
	ds, err := s.store.Schedules(ctx, cbdash.ScheduleQuery{Deleted: deleted})
	if err != nil {
		return nil, err
	}
	for i := range ds {
		ds[i] = withNext(ds[i])
	}
	return ds, nil
}

func withNext(d cbdash.DrillSchedule) cbdash.DrillSchedule {
	d.NextRun, _ = d.NextRunAfter()
	return d
}

// maxDuePerTick bounds the due times of one schedule handled at one Tick
// (those of a weekly rule missed while the server was down for years).
const maxDuePerTick = 100

// Tick handles every due time that has come, as the package comment
// says. The collector calls it every second. Errors are logged: a
// schedule the store cannot read now is handled at a later Tick.
func (s *Scheduler) Tick(ctx context.Context) {
	ds, err := s.store.Schedules(ctx, cbdash.ScheduleQuery{Runs: 1, Limit: 1000})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("drill schedules", "err", err)
		}
		return
	}
	for _, d := range ds {
		s.tickOne(ctx, d)
	}
}

// tickOne handles the due times of schedule d that have come, after
// taking over its last run when its claim lapsed.
func (s *Scheduler) tickOne(ctx context.Context, d cbdash.DrillSchedule) {
	now := s.m.now().UTC()
	if len(d.Runs) > 0 && d.Runs[0].Result == cbdash.RunClaimed && now.Sub(d.Runs[0].At) >= ScheduleLease {
		if err := s.takeOver(ctx, d, d.Runs[0].Due, now); err != nil && !errors.Is(err, cbdash.ErrConflict) && ctx.Err() == nil {
			s.log.Error("drill schedule run: take over", "schedule", d.ID, "due", d.Runs[0].Due, "err", err)
		}
	}
	var dues []time.Time
	for due, ok := d.Rule.Next(d.LastHandled()); ok && !due.After(now) && len(dues) < maxDuePerTick; due, ok = d.Rule.Next(due) {
		dues = append(dues, due)
	}
	for _, due := range dues {
		if err := s.runDue(ctx, d, due, now); err != nil && !errors.Is(err, cbdash.ErrConflict) && ctx.Err() == nil {
			s.log.Error("drill schedule run", "schedule", d.ID, "due", due, "err", err)
		}
	}
}

// runDue claims schedule d's run due at due and skips or starts it.
// Errors: cbdash.ErrConflict when another collector took it, or the
// store's.
func (s *Scheduler) runDue(ctx context.Context, d cbdash.DrillSchedule, due, now time.Time) error {
	run := cbdash.ScheduleRun{ScheduleID: d.ID, Due: due, At: now, Result: cbdash.RunClaimed, ClaimedBy: s.node}
	if !now.Before(due.Add(d.TTL)) {
		run.Result, run.Reason = cbdash.RunSkipped, MissedReason
		return s.store.ClaimScheduleRun(ctx, run)
	}
	if err := s.store.ClaimScheduleRun(ctx, run); err != nil {
		return err
	}
	return s.start(ctx, d, run, now)
}

// takeOver claims again schedule d's run due at due, whose claimer
// stopped, and finishes it: with the hold that collector created for
// it, if any; else as runDue would.
func (s *Scheduler) takeOver(ctx context.Context, d cbdash.DrillSchedule, due, now time.Time) error {
	run := cbdash.ScheduleRun{ScheduleID: d.ID, Due: due, At: now, Result: cbdash.RunClaimed, ClaimedBy: s.node}
	taken, err := s.store.TakeOverScheduleRun(ctx, run, now.Add(-ScheduleLease))
	if err != nil {
		return err
	}
	s.log.Warn("scheduled drill taken over: its claimer stopped before finishing it", "schedule", d.ID, "due", due, "from", taken.TakenOverFrom)
	end := due.Add(d.TTL)
	hs, err := s.store.Holds(ctx, cbdash.HoldQuery{Limit: 1000})
	if err != nil {
		return err
	}
	for _, h := range hs {
		if h.Actor == ScheduleActor(d.ID) && h.Until.Equal(end) {
			run.Result, run.HoldID = cbdash.RunStarted, h.ID
			return s.store.FinishScheduleRun(ctx, run)
		}
	}
	if !now.Before(end) {
		run.Result, run.Reason = cbdash.RunSkipped, MissedReason
		return s.store.FinishScheduleRun(ctx, run)
	}
	return s.start(ctx, d, run, now)
}

// start runs pre-flight for claimed run and starts its drill, or skips
// it with the reason, and records which.
func (s *Scheduler) start(ctx context.Context, d cbdash.DrillSchedule, run cbdash.ScheduleRun, now time.Time) error {
	if s.stopped("claimed") {
		return errStopped
	}
	end := run.Due.Add(d.TTL)
	req := d.HoldRequest
	req.Actor, req.TTL = ScheduleActor(d.ID), end.Sub(now) // create makes it end at end exactly
	req.Reason = fmt.Sprintf("%s (schedule %s, %s)", d.Reason, d.ID, d.Rule)
	if len(req.Reason) > 1000 {
		req.Reason = d.Reason
	}
	reasons, err := s.m.Preflight(ctx, req)
	if err == nil && len(reasons) > 0 {
		err = fmt.Errorf("pre-flight: %s", strings.Join(reasons, "; "))
	}
	var h cbdash.HoldRecord
	if err == nil {
		h, err = s.m.createUntil(ctx, req, end)
	}
	if err != nil {
		run.Result, run.Reason = cbdash.RunSkipped, err.Error()
		s.log.Info("scheduled drill skipped", "schedule", d.ID, "due", run.Due, "reason", run.Reason)
	} else {
		run.Result, run.HoldID = cbdash.RunStarted, h.ID
		s.log.Info("scheduled drill started", "schedule", d.ID, "due", run.Due, "hold", h.ID)
	}
	if s.stopped("created") {
		return errStopped
	}
	if err := s.store.FinishScheduleRun(ctx, run); err != nil {
		if errors.Is(err, cbdash.ErrConflict) && run.HoldID != "" {
			s.log.Error("scheduled drill: the run was taken over before it was recorded (this collector stalled past the lease)",
				"schedule", d.ID, "due", run.Due, "hold", run.HoldID)
		}
		return err
	}
	return nil
}
