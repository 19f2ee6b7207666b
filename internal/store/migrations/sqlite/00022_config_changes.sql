-- Breaker configuration changes seen in hellos (internal/incident), shown
-- as markers on incident pages. Configs are protocol.BreakerConfig JSON.

-- +goose Up
CREATE TABLE config_changes (
    id       INTEGER PRIMARY KEY,
    service  TEXT    NOT NULL,
    breaker  TEXT    NOT NULL,
    instance TEXT    NOT NULL,
    at_ms    INTEGER NOT NULL,
    previous TEXT    NOT NULL,
    config   TEXT    NOT NULL
);
CREATE INDEX config_changes_dep ON config_changes (service, breaker, at_ms);

-- +goose Down
DROP TABLE config_changes;
