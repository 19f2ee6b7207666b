-- The state of alerts that fired (internal/alert): one row per rule and
-- subject from the moment it fires until its resolve has been delivered,
-- so a restart neither repeats a firing nor loses a resolve. pending is
-- the event whose webhook call has not completed ('' = none).

-- +goose Up
CREATE TABLE alert_firing (
    rule_id  INTEGER NOT NULL,
    subject  TEXT    NOT NULL,
    firing   INTEGER NOT NULL,
    since_ms INTEGER NOT NULL,
    detail   TEXT    NOT NULL DEFAULT '',
    pending  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (rule_id, subject)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE alert_firing;
