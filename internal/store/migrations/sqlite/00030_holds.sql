-- Holds: operator trips kept as desired state (what they select, until
-- when, who and why, who released them), the instance breakers each was
-- applied to, and what those breakers counted while held (the drill
-- report). Holds and their coverage are never deleted, like the command
-- audit log. Numbers 00030-00039 belong to holds.

-- +goose Up
CREATE TABLE holds (
    id             TEXT    PRIMARY KEY,
    selector       TEXT    NOT NULL, -- JSON cbdash.Selector
    service        TEXT    NOT NULL, -- selector.service, for queries ('*' = every service)
    breaker        TEXT    NOT NULL,
    action         TEXT    NOT NULL,
    ttl_ms         INTEGER NOT NULL,
    reason         TEXT    NOT NULL DEFAULT '',
    actor          TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    until          INTEGER NOT NULL,
    released_at    INTEGER NOT NULL DEFAULT 0,
    released_by    TEXT    NOT NULL DEFAULT '',
    release_reason TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX holds_until ON holds (until);

CREATE TABLE hold_coverage (
    hold_id     TEXT    NOT NULL REFERENCES holds (id),
    service     TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    breaker     TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    command_id  TEXT    NOT NULL,
    covered_at  INTEGER NOT NULL,
    joined_late INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker, started_at)
) WITHOUT ROWID;

CREATE TABLE hold_stats (
    hold_id        TEXT    NOT NULL REFERENCES holds (id),
    service        TEXT    NOT NULL,
    instance       TEXT    NOT NULL,
    breaker        TEXT    NOT NULL,
    counts         TEXT    NOT NULL, -- JSON protocol.Counts
    latency        TEXT    NOT NULL, -- JSON histogram, protocol.LatencyBoundsMillis
    latency_sum_ms REAL    NOT NULL DEFAULT 0,
    windows        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker)
) WITHOUT ROWID;

-- The commands a hold was sent as, and its release, name it.
ALTER TABLE commands ADD COLUMN hold_id TEXT NOT NULL DEFAULT '';

-- +goose StatementBegin
CREATE TRIGGER holds_append_only BEFORE DELETE ON holds
BEGIN
    SELECT RAISE(ABORT, 'holds are part of the audit log and never deleted');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER hold_coverage_append_only BEFORE DELETE ON hold_coverage
BEGIN
    SELECT RAISE(ABORT, 'holds are part of the audit log and never deleted');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER hold_coverage_append_only;
DROP TRIGGER holds_append_only;
ALTER TABLE commands DROP COLUMN hold_id;
DROP TABLE hold_stats;
DROP TABLE hold_coverage;
DROP TABLE holds;
