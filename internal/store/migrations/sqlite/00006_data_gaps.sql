-- Time whose window reports an agent dropped under memory pressure
-- (protocol Dropped.Lost): per dependency and instance, [gap_start,
-- gap_end) in Unix ms and the calls the dropped reports counted. History
-- shows it as a gap, not as a dip to zero.

-- +goose Up
CREATE TABLE data_gaps (
    id          INTEGER PRIMARY KEY,
    dep_id      INTEGER NOT NULL,
    instance    TEXT    NOT NULL,
    gap_start   INTEGER NOT NULL,
    gap_end     INTEGER NOT NULL,
    calls       INTEGER NOT NULL,
    received_at INTEGER NOT NULL
);
CREATE INDEX data_gaps_by_dep ON data_gaps (dep_id, gap_end);

-- +goose Down
DROP TABLE data_gaps;
