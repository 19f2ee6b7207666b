-- PostgreSQL twin of ../sqlite/00023_alert_firing.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- The state of alerts that fired (internal/alert): one row per rule and
-- subject from the moment it fires until its resolve has been delivered,
-- so a restart neither repeats a firing nor loses a resolve. pending is
-- the event whose webhook call has not completed ('' = none).

-- +goose Up
CREATE TABLE alert_firing (
    rule_id  BIGINT NOT NULL,
    subject  TEXT    NOT NULL,
    firing   BIGINT NOT NULL,
    since_ms BIGINT NOT NULL,
    detail   TEXT    NOT NULL DEFAULT '',
    pending  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (rule_id, subject)
);

-- +goose Down
DROP TABLE alert_firing;
