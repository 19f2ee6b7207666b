package collector

import (
	"context"

	"github.com/cbdash/cbdash"
)

// Drill schedules are package holds' (holds.Scheduler): the collector
// runs its Tick every second, after the holds' sweep, and serves the
// methods below. Every collector of a cluster ticks; the store lets one
// of them take each due time.

// CreateSchedule stores a drill schedule by actor (req.Actor is replaced
// by its Name); see holds.Scheduler.Create. Errors: cbdash.ErrInvalid for
// a zero actor or a bad field, or the store's.
func (c *Collector) CreateSchedule(ctx context.Context, actor cbdash.Actor, req cbdash.ScheduleRequest) (cbdash.DrillSchedule, error) {
	if actor.IsZero() {
		return cbdash.DrillSchedule{}, errNoActor
	}
	req.Actor = actor.Name
	return c.schedules.Create(ctx, req)
}

// DeleteSchedule ends schedule id by actor with reason (a drill it
// started goes on); see holds.Scheduler.Delete. Errors: cbdash.ErrInvalid
// for a zero actor or a missing reason, cbdash.ErrNotFound,
// cbdash.ErrConflict when already deleted, or the store's.
func (c *Collector) DeleteSchedule(ctx context.Context, actor cbdash.Actor, id, reason string) (cbdash.DrillSchedule, error) {
	if actor.IsZero() {
		return cbdash.DrillSchedule{}, errNoActor
	}
	return c.schedules.Delete(ctx, id, actor.Name, reason)
}

// Schedules lists drill schedules, newest first, with their next run and
// last runs (deleted ones too when deleted is set). Errors: the store's.
func (c *Collector) Schedules(ctx context.Context, deleted bool) ([]cbdash.DrillSchedule, error) {
	return c.schedules.Schedules(ctx, deleted)
}

// Schedule returns one drill schedule. Errors: cbdash.ErrNotFound or the
// store's.
func (c *Collector) Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error) {
	return c.schedules.Schedule(ctx, id)
}
