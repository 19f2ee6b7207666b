-- Window reports, summed over the instances of a dependency (service +
-- breaker), at three resolutions. The bucket start is Unix ms. Counts are
-- exact sums; in_flight and open_n are sums over instances within a second
-- and maxima over the seconds of a minute / minutes of an hour; latency is
-- the merged histogram (uvarint per bucket, protocol.LatencyBoundsMillis),
-- NULL when no call ended.

-- +goose Up
CREATE TABLE dependencies (
    id      INTEGER PRIMARY KEY,
    service TEXT NOT NULL,
    breaker TEXT NOT NULL,
    UNIQUE (service, breaker)
);

CREATE TABLE windows_second (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    admitted           INTEGER NOT NULL DEFAULT 0,
    successes          INTEGER NOT NULL DEFAULT 0,
    failures           INTEGER NOT NULL DEFAULT 0,
    errors             INTEGER NOT NULL DEFAULT 0,
    timeouts           INTEGER NOT NULL DEFAULT 0,
    panics             INTEGER NOT NULL DEFAULT 0,
    slow               INTEGER NOT NULL DEFAULT 0,
    ignored            INTEGER NOT NULL DEFAULT 0,
    rejected_open      INTEGER NOT NULL DEFAULT 0,
    rejected_half_open INTEGER NOT NULL DEFAULT 0,
    rejected_forced    INTEGER NOT NULL DEFAULT 0,
    rejected_bulkhead  INTEGER NOT NULL DEFAULT 0,
    fallback_success   INTEGER NOT NULL DEFAULT 0,
    fallback_failure   INTEGER NOT NULL DEFAULT 0,
    in_flight          INTEGER NOT NULL DEFAULT 0,
    open_n             INTEGER NOT NULL DEFAULT 0,
    reports            INTEGER NOT NULL DEFAULT 0,
    latency_sum        REAL    NOT NULL DEFAULT 0,
    latency            BLOB,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

CREATE TABLE windows_minute (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    admitted           INTEGER NOT NULL DEFAULT 0,
    successes          INTEGER NOT NULL DEFAULT 0,
    failures           INTEGER NOT NULL DEFAULT 0,
    errors             INTEGER NOT NULL DEFAULT 0,
    timeouts           INTEGER NOT NULL DEFAULT 0,
    panics             INTEGER NOT NULL DEFAULT 0,
    slow               INTEGER NOT NULL DEFAULT 0,
    ignored            INTEGER NOT NULL DEFAULT 0,
    rejected_open      INTEGER NOT NULL DEFAULT 0,
    rejected_half_open INTEGER NOT NULL DEFAULT 0,
    rejected_forced    INTEGER NOT NULL DEFAULT 0,
    rejected_bulkhead  INTEGER NOT NULL DEFAULT 0,
    fallback_success   INTEGER NOT NULL DEFAULT 0,
    fallback_failure   INTEGER NOT NULL DEFAULT 0,
    in_flight          INTEGER NOT NULL DEFAULT 0,
    open_n             INTEGER NOT NULL DEFAULT 0,
    reports            INTEGER NOT NULL DEFAULT 0,
    latency_sum        REAL    NOT NULL DEFAULT 0,
    latency            BLOB,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

CREATE TABLE windows_hour (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    admitted           INTEGER NOT NULL DEFAULT 0,
    successes          INTEGER NOT NULL DEFAULT 0,
    failures           INTEGER NOT NULL DEFAULT 0,
    errors             INTEGER NOT NULL DEFAULT 0,
    timeouts           INTEGER NOT NULL DEFAULT 0,
    panics             INTEGER NOT NULL DEFAULT 0,
    slow               INTEGER NOT NULL DEFAULT 0,
    ignored            INTEGER NOT NULL DEFAULT 0,
    rejected_open      INTEGER NOT NULL DEFAULT 0,
    rejected_half_open INTEGER NOT NULL DEFAULT 0,
    rejected_forced    INTEGER NOT NULL DEFAULT 0,
    rejected_bulkhead  INTEGER NOT NULL DEFAULT 0,
    fallback_success   INTEGER NOT NULL DEFAULT 0,
    fallback_failure   INTEGER NOT NULL DEFAULT 0,
    in_flight          INTEGER NOT NULL DEFAULT 0,
    open_n             INTEGER NOT NULL DEFAULT 0,
    reports            INTEGER NOT NULL DEFAULT 0,
    latency_sum        REAL    NOT NULL DEFAULT 0,
    latency            BLOB,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

-- How far each finer level has been rolled into the next coarser one:
-- 'second' = every second bucket before done_until is in windows_minute,
-- 'minute' = every minute bucket before done_until is in windows_hour.
CREATE TABLE rollups (
    level      TEXT    PRIMARY KEY,
    done_until INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO rollups (level, done_until) VALUES ('second', 0), ('minute', 0);

-- +goose Down
DROP TABLE rollups;
DROP TABLE windows_hour;
DROP TABLE windows_minute;
DROP TABLE windows_second;
DROP TABLE dependencies;
