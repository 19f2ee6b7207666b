-- PostgreSQL twin of ../sqlite/00030_holds.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
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
    ttl_ms         BIGINT NOT NULL,
    reason         TEXT    NOT NULL DEFAULT '',
    actor          TEXT    NOT NULL DEFAULT '',
    created_at     BIGINT NOT NULL,
    until          BIGINT NOT NULL,
    released_at    BIGINT NOT NULL DEFAULT 0,
    released_by    TEXT    NOT NULL DEFAULT '',
    release_reason TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX holds_until ON holds (until);

CREATE TABLE hold_coverage (
    hold_id     TEXT    NOT NULL REFERENCES holds (id),
    service     TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    breaker     TEXT    NOT NULL,
    started_at  BIGINT NOT NULL,
    command_id  TEXT    NOT NULL,
    covered_at  BIGINT NOT NULL,
    joined_late BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker, started_at)
);

CREATE TABLE hold_stats (
    hold_id        TEXT    NOT NULL REFERENCES holds (id),
    service        TEXT    NOT NULL,
    instance       TEXT    NOT NULL,
    breaker        TEXT    NOT NULL,
    counts         TEXT    NOT NULL, -- JSON protocol.Counts
    latency        TEXT    NOT NULL, -- JSON histogram, protocol.LatencyBoundsMillis
    latency_sum_ms DOUBLE PRECISION NOT NULL DEFAULT 0,
    windows        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker)
);

-- The commands a hold was sent as, and its release, name it.
ALTER TABLE commands ADD COLUMN hold_id TEXT NOT NULL DEFAULT '';

CREATE TRIGGER holds_append_only BEFORE DELETE ON holds
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('holds are part of the audit log and never deleted');

CREATE TRIGGER hold_coverage_append_only BEFORE DELETE ON hold_coverage
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('holds are part of the audit log and never deleted');

-- +goose Down
DROP TRIGGER hold_coverage_append_only ON hold_coverage;
DROP TRIGGER holds_append_only ON holds;
ALTER TABLE commands DROP COLUMN hold_id;
DROP TABLE hold_stats;
DROP TABLE hold_coverage;
DROP TABLE holds;
