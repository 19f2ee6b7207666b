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

// MissedReason is the reason a run is skipped when its drill would have
// ended before any collector got to it.
const MissedReason = "missed while the server was down"

// ScheduleStore is what a Scheduler reads and writes (the store's).
type ScheduleStore interface {
	CreateSchedule(ctx context.Context, d cbdash.DrillSchedule) error
	DeleteSchedule(ctx context.Context, id string, at time.Time, by, reason string) (cbdash.DrillSchedule, error)
	Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error)
	Schedules(ctx context.Context, q cbdash.ScheduleQuery) ([]cbdash.DrillSchedule, error)
	ClaimScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error
	FinishScheduleRun(ctx context.Context, r cbdash.ScheduleRun) error
}

// Scheduler runs scheduled drills through a Manager. Create it with
// NewScheduler; its methods are safe for concurrent use (Tick is meant to
// be called from one loop).
type Scheduler struct {
	store ScheduleStore
	m     *Manager
	log   *slog.Logger
}

// NewScheduler returns a Scheduler of the schedules in st that starts
// drills with m, on m's clock.
func NewScheduler(st ScheduleStore, m *Manager) *Scheduler {
	return &Scheduler{store: st, m: m, log: m.log}
}

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

// tickOne handles the due times of schedule d that have come.
func (s *Scheduler) tickOne(ctx context.Context, d cbdash.DrillSchedule) {
	now := s.m.now().UTC()
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
	run := cbdash.ScheduleRun{ScheduleID: d.ID, Due: due, At: now, Result: cbdash.RunClaimed}
	end := due.Add(d.TTL)
	if !now.Before(end) {
		run.Result, run.Reason = cbdash.RunSkipped, MissedReason
		return s.store.ClaimScheduleRun(ctx, run)
	}
	if err := s.store.ClaimScheduleRun(ctx, run); err != nil {
		return err
	}
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
		s.log.Info("scheduled drill skipped", "schedule", d.ID, "due", due, "reason", run.Reason)
	} else {
		run.Result, run.HoldID = cbdash.RunStarted, h.ID
		s.log.Info("scheduled drill started", "schedule", d.ID, "due", due, "hold", h.ID)
	}
	return s.store.FinishScheduleRun(ctx, run)
}
