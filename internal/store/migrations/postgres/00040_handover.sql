-- PostgreSQL twin of ../sqlite/00040_handover.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Handover of the singletons (issue 28): how far the leader of incident
-- detection and of alert delivery has processed the stored transitions,
-- so that the next leader (or the same collector after a restart) replays
-- what came after; and the keys that make a replay, or two leaders
-- overlapping for a moment, store an incident or an alert once.
-- Times are Unix milliseconds.

-- +goose Up
CREATE TABLE leader_marks (
    name        TEXT   PRIMARY KEY,
    received_ms BIGINT NOT NULL
);

CREATE INDEX transitions_received ON transitions (received_at);

ALTER TABLE incidents ADD COLUMN episode_ms BIGINT;
CREATE UNIQUE INDEX incidents_episode ON incidents (service, breaker, episode_ms);

CREATE TABLE alert_episodes (
    rule_id     BIGINT NOT NULL,
    subject     TEXT   NOT NULL,
    since_ms    BIGINT NOT NULL,
    resolved_ms BIGINT NOT NULL,
    PRIMARY KEY (rule_id, subject, since_ms)
);

-- +goose Down
DROP TABLE alert_episodes;
DROP INDEX incidents_episode;
ALTER TABLE incidents DROP COLUMN episode_ms;
DROP INDEX transitions_received;
DROP TABLE leader_marks;
