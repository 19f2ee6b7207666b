-- PostgreSQL twin of ../sqlite/00052_drill_schedules.sql: same version, same tables; BIGINT for integers.
-- Scheduled drills (issue 32): a schedule is the hold each run creates
-- (as a manual drill takes it) and a rule (a one-off time or weekdays at
-- a time of day, UTC); each due time a collector takes is one run, keyed
-- by (schedule, due), so that of several collectors sharing the database
-- one only starts it. Schedules and runs are never deleted, like holds:
-- deleting a schedule records who, when and why.

-- +goose Up
CREATE TABLE drill_schedules (
    id            TEXT    PRIMARY KEY,
    request       TEXT    NOT NULL, -- JSON cbdash.HoldRequest (selector, ttl, stop conditions, steps, reason)
    service       TEXT    NOT NULL, -- selector.service, for reading ('*' = every service)
    breaker       TEXT    NOT NULL,
    rule          TEXT    NOT NULL, -- cbdash.ScheduleRule as text
    actor         TEXT    NOT NULL DEFAULT '',
    created_at    BIGINT NOT NULL,
    deleted_at    BIGINT NOT NULL DEFAULT 0,
    deleted_by    TEXT    NOT NULL DEFAULT '',
    delete_reason TEXT    NOT NULL DEFAULT ''
);

CREATE TABLE drill_schedule_runs (
    schedule_id TEXT    NOT NULL REFERENCES drill_schedules (id),
    due         BIGINT NOT NULL, -- Unix ms
    at          BIGINT NOT NULL, -- when a collector took it
    result      TEXT    NOT NULL, -- claimed, started, skipped
    hold_id     TEXT    NOT NULL DEFAULT '',
    reason      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (schedule_id, due)
);

CREATE TRIGGER drill_schedules_append_only BEFORE DELETE ON drill_schedules
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('drill schedules are part of the audit log and never deleted');

CREATE TRIGGER drill_schedule_runs_append_only BEFORE DELETE ON drill_schedule_runs
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('drill schedules are part of the audit log and never deleted');

-- +goose Down
DROP TRIGGER drill_schedule_runs_append_only ON drill_schedule_runs;
DROP TRIGGER drill_schedules_append_only ON drill_schedules;
DROP TABLE drill_schedule_runs;
DROP TABLE drill_schedules;
