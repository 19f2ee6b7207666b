-- Issue 36: what a hold prevented is counted by the collector that stores
-- each window report, and an instance may move to another collector
-- mid-hold. Each collector keeps its own running totals of an instance
-- breaker in its own row (collector = its cluster node id; '' for the rows
-- written before), saved whole each time (a retried save writes the same
-- figures again, never twice); readers sum a breaker's rows.

-- +goose Up
ALTER TABLE hold_stats ADD COLUMN collector TEXT NOT NULL DEFAULT '';
ALTER TABLE hold_stats DROP CONSTRAINT hold_stats_pkey;
ALTER TABLE hold_stats ADD PRIMARY KEY (hold_id, service, instance, breaker, collector);

-- +goose Down
-- Going down keeps one collector's row of each breaker (the first by name).
DELETE FROM hold_stats WHERE collector <> '' AND EXISTS (SELECT 1 FROM hold_stats o
    WHERE o.hold_id = hold_stats.hold_id AND o.service = hold_stats.service AND o.instance = hold_stats.instance
    AND o.breaker = hold_stats.breaker AND o.collector < hold_stats.collector);
ALTER TABLE hold_stats DROP CONSTRAINT hold_stats_pkey;
ALTER TABLE hold_stats ADD PRIMARY KEY (hold_id, service, instance, breaker);
ALTER TABLE hold_stats DROP COLUMN collector;
