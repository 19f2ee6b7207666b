-- Incidents found by internal/incident, and operators' notes on them.
-- Times are Unix milliseconds; end_ms is NULL while the incident is open.

-- +goose Up
CREATE TABLE incidents (
    id             INTEGER PRIMARY KEY,
    service        TEXT    NOT NULL,
    breaker        TEXT    NOT NULL,
    start_ms       INTEGER NOT NULL,
    end_ms         INTEGER,
    instances      TEXT    NOT NULL DEFAULT '[]', -- JSON array of instance ids
    opens          INTEGER NOT NULL DEFAULT 0,
    first_instance TEXT    NOT NULL DEFAULT '',
    first_cause    TEXT    NOT NULL DEFAULT '{}'  -- JSON protocol.Cause
);
CREATE INDEX incidents_start ON incidents (start_ms);
CREATE INDEX incidents_dep ON incidents (service, breaker, start_ms);
CREATE INDEX incidents_open ON incidents (id) WHERE end_ms IS NULL;

CREATE TABLE incident_notes (
    id          INTEGER PRIMARY KEY,
    incident_id INTEGER NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    at_ms       INTEGER NOT NULL,
    author      TEXT    NOT NULL DEFAULT '',
    text        TEXT    NOT NULL
);
CREATE INDEX incident_notes_incident ON incident_notes (incident_id, at_ms);

-- +goose Down
DROP TABLE incident_notes;
DROP TABLE incidents;
