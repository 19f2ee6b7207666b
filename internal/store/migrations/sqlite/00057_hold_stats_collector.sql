-- Issue 36: what a hold prevented is counted by the collector that stores
-- each window report, and an instance may move to another collector
-- mid-hold. Each collector keeps its own running totals of an instance
-- breaker in its own row (collector = its cluster node id; '' for the rows
-- written before), saved whole each time (a retried save writes the same
-- figures again, never twice); readers sum a breaker's rows. SQLite
-- cannot change a primary key: the table is copied.

-- +goose Up
CREATE TABLE hold_stats_new (
    hold_id        TEXT    NOT NULL REFERENCES holds (id),
    service        TEXT    NOT NULL,
    instance       TEXT    NOT NULL,
    breaker        TEXT    NOT NULL,
    collector      TEXT    NOT NULL DEFAULT '',
    counts         TEXT    NOT NULL, -- JSON protocol.Counts
    latency        TEXT    NOT NULL, -- JSON histogram, protocol.LatencyBoundsMillis
    latency_sum_ms REAL    NOT NULL DEFAULT 0,
    windows        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker, collector)
) WITHOUT ROWID;
INSERT INTO hold_stats_new (hold_id, service, instance, breaker, counts, latency, latency_sum_ms, windows)
    SELECT hold_id, service, instance, breaker, counts, latency, latency_sum_ms, windows FROM hold_stats;
DROP TABLE hold_stats;
ALTER TABLE hold_stats_new RENAME TO hold_stats;

-- +goose Down
-- Going down keeps one collector's row of each breaker (the first by name).
CREATE TABLE hold_stats_old (
    hold_id        TEXT    NOT NULL REFERENCES holds (id),
    service        TEXT    NOT NULL,
    instance       TEXT    NOT NULL,
    breaker        TEXT    NOT NULL,
    counts         TEXT    NOT NULL, -- JSON protocol.Counts
    latency        TEXT    NOT NULL, -- JSON histogram, protocol.LatencyBoundsMillis
    latency_sum_ms REAL    NOT NULL DEFAULT 0,
    windows        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hold_id, service, instance, breaker)
) WITHOUT ROWID;
INSERT OR IGNORE INTO hold_stats_old (hold_id, service, instance, breaker, counts, latency, latency_sum_ms, windows)
    SELECT hold_id, service, instance, breaker, counts, latency, latency_sum_ms, windows FROM hold_stats
    ORDER BY hold_id, service, instance, breaker, collector;
DROP TABLE hold_stats;
ALTER TABLE hold_stats_old RENAME TO hold_stats;
