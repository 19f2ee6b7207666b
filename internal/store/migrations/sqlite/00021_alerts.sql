-- Alert rules (internal/alert) and the webhook delivery log. The log keeps
-- rule_id without a foreign key: deleting a rule keeps its history.

-- +goose Up
CREATE TABLE alert_rules (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL DEFAULT '',
    service     TEXT    NOT NULL,
    breaker     TEXT    NOT NULL DEFAULT '',
    kind        TEXT    NOT NULL,
    for_ms      INTEGER NOT NULL DEFAULT 0,
    margin      REAL    NOT NULL DEFAULT 0,
    hold_ms     INTEGER NOT NULL DEFAULT 0,
    webhook_url TEXT    NOT NULL,
    format      TEXT    NOT NULL DEFAULT 'json',
    disabled    INTEGER NOT NULL DEFAULT 0,
    created_ms  INTEGER NOT NULL
);

CREATE TABLE alert_deliveries (
    id       INTEGER PRIMARY KEY,
    rule_id  INTEGER NOT NULL,
    subject  TEXT    NOT NULL,
    event    TEXT    NOT NULL,
    url      TEXT    NOT NULL,
    status   INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    ok       INTEGER NOT NULL DEFAULT 0,
    error    TEXT    NOT NULL DEFAULT '',
    body     TEXT    NOT NULL DEFAULT '',
    at_ms    INTEGER NOT NULL
);
CREATE INDEX alert_deliveries_rule ON alert_deliveries (rule_id, id);

-- +goose Down
DROP TABLE alert_deliveries;
DROP TABLE alert_rules;
