-- Issue 32: a claimed schedule run has a lease. claimed_by is the
-- collector (cluster node) that claimed it, at (as before) when; a run
-- still claimed a lease after its claim (holds.ScheduleLease, 30 s) may
-- be taken over by another collector, atomically (one winner: the update
-- matches only the claim it replaces), and taken_over_from then names the
-- collector whose claim was not finished.

-- +goose Up
ALTER TABLE drill_schedule_runs ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
ALTER TABLE drill_schedule_runs ADD COLUMN taken_over_from TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE drill_schedule_runs DROP COLUMN taken_over_from;
ALTER TABLE drill_schedule_runs DROP COLUMN claimed_by;
