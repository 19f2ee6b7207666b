-- Issue 36: the windows tables get a writer column in their primary key
-- (dep_id, start, writer): each store process writes rows of its own
-- writer id only, so several processes on one database never touch the
-- same row (see doc.go, Several writers). A SQLite file has one writer,
-- whose id is always 0: its rows keep the id 0. SQLite cannot change a
-- primary key in place: each table is rebuilt (WITHOUT ROWID as before)
-- with its rows copied. Down keeps the rows of writer 0, which on SQLite
-- are all of them.

-- +goose Up
CREATE TABLE windows_second_new (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    writer             INTEGER NOT NULL DEFAULT 0,
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start, writer)
) WITHOUT ROWID;

INSERT INTO windows_second_new (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, writer)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, 0 FROM windows_second;
DROP TABLE windows_second;
ALTER TABLE windows_second_new RENAME TO windows_second;

CREATE TABLE windows_minute_new (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    writer             INTEGER NOT NULL DEFAULT 0,
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start, writer)
) WITHOUT ROWID;

INSERT INTO windows_minute_new (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, writer)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, 0 FROM windows_minute;
DROP TABLE windows_minute;
ALTER TABLE windows_minute_new RENAME TO windows_minute;

CREATE TABLE windows_hour_new (
    dep_id             INTEGER NOT NULL,
    start              INTEGER NOT NULL,
    writer             INTEGER NOT NULL DEFAULT 0,
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start, writer)
) WITHOUT ROWID;

INSERT INTO windows_hour_new (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, writer)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp, 0 FROM windows_hour;
DROP TABLE windows_hour;
ALTER TABLE windows_hour_new RENAME TO windows_hour;

-- +goose Down
CREATE TABLE windows_second_old (
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

INSERT INTO windows_second_old (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp FROM windows_second WHERE writer = 0;
DROP TABLE windows_second;
ALTER TABLE windows_second_old RENAME TO windows_second;

CREATE TABLE windows_minute_old (
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

INSERT INTO windows_minute_old (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp FROM windows_minute WHERE writer = 0;
DROP TABLE windows_minute;
ALTER TABLE windows_minute_old RENAME TO windows_minute;

CREATE TABLE windows_hour_old (
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
    misuse             INTEGER NOT NULL DEFAULT 0,
    rejected_ramp      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, start)
) WITHOUT ROWID;

INSERT INTO windows_hour_old (dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp)
    SELECT dep_id, start, admitted, successes, failures, errors, timeouts, panics, slow, ignored, rejected_open, rejected_half_open, rejected_forced, rejected_bulkhead, fallback_success, fallback_failure, in_flight, open_n, reports, latency_sum, latency, misuse, rejected_ramp FROM windows_hour WHERE writer = 0;
DROP TABLE windows_hour;
ALTER TABLE windows_hour_old RENAME TO windows_hour;
