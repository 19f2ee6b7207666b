-- Services, their instances, the breakers each instance declared, batch
-- de-duplication per agent process, and transitions (never downsampled).
-- All times are Unix milliseconds (UTC).

-- +goose Up
CREATE TABLE services (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);

CREATE TABLE instances (
    id          INTEGER PRIMARY KEY,
    service_id  INTEGER NOT NULL REFERENCES services (id),
    name        TEXT    NOT NULL,
    sdk_version TEXT    NOT NULL DEFAULT '',
    labels      TEXT    NOT NULL DEFAULT '{}', -- JSON object
    started_at  INTEGER NOT NULL DEFAULT 0,    -- start of the latest agent process seen
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    UNIQUE (service_id, name)
);

-- One row per agent process (instance, started_at): the last batch stored.
CREATE TABLE instance_runs (
    instance_id INTEGER NOT NULL REFERENCES instances (id),
    started_at  INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    PRIMARY KEY (instance_id, started_at)
) WITHOUT ROWID;

CREATE TABLE breakers (
    id              INTEGER PRIMARY KEY,
    instance_id     INTEGER NOT NULL REFERENCES instances (id),
    name            TEXT    NOT NULL,
    config          TEXT    NOT NULL DEFAULT '{}', -- protocol.BreakerConfig as JSON
    state           TEXT    NOT NULL DEFAULT '',   -- last reported state
    last_transition INTEGER NOT NULL DEFAULT 0,
    UNIQUE (instance_id, name)
);

CREATE TABLE transitions (
    id          INTEGER PRIMARY KEY,
    service     TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    breaker     TEXT    NOT NULL,
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    cause       TEXT    NOT NULL, -- protocol.Cause as JSON
    open_ms     INTEGER NOT NULL DEFAULT 0,
    received_at INTEGER NOT NULL
);
CREATE INDEX transitions_at ON transitions (at);
CREATE INDEX transitions_dep_at ON transitions (service, breaker, at);

-- +goose Down
DROP TABLE transitions;
DROP TABLE breakers;
DROP TABLE instance_runs;
DROP TABLE instances;
DROP TABLE services;
