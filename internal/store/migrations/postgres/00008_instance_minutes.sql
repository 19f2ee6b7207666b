-- PostgreSQL twin of ../sqlite/00008_instance_minutes.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Per-instance history: one row per dependency (dependencies.id),
-- instance (instances.id) and minute, with the minute's calls, failures, slow calls and rejections and
-- the worst state seen in it (cbdash.StateRank: 0 open ... 4 closed), so the
-- dependency page can draw instances against time. Kept for
-- Retention.InstanceMinutes (24 h by default).

-- +goose Up
-- Keyed by dependency and instance, not by the breakers row, which a
-- hello that no longer declares the breaker deletes: the history stays.
CREATE TABLE instance_minutes (
    dep_id      BIGINT NOT NULL REFERENCES dependencies (id),
    instance_id BIGINT NOT NULL REFERENCES instances (id),
    minute      BIGINT NOT NULL, -- Unix ms of the minute's start
    calls      BIGINT NOT NULL,
    failures   BIGINT NOT NULL,
    slow       BIGINT NOT NULL,
    rejected   BIGINT NOT NULL,
    state_rank BIGINT NOT NULL,
    PRIMARY KEY (dep_id, minute, instance_id)
);
CREATE INDEX instance_minutes_minute ON instance_minutes (minute);

-- +goose Down
DROP TABLE instance_minutes;
