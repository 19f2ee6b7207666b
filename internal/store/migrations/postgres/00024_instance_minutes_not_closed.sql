-- PostgreSQL twin of ../sqlite/00024_instance_minutes_not_closed.sql: same
-- version, same index.
-- The overview's fleet timeline (Store.FleetNotClosed) counts, per minute
-- of the last hour, the instance minutes that were not closed. Through
-- instance_minutes_minute it read every row of the hour; this index holds
-- only the rows that were open, half-open or forced open (cbdash.StateRank
-- 0, 1, 2; the query says state_rank < 3 as the index does, so that the
-- planner may use it).

-- +goose Up
CREATE INDEX instance_minutes_not_closed ON instance_minutes (minute, dep_id, instance_id) WHERE state_rank < 3;

-- +goose Down
DROP INDEX instance_minutes_not_closed;
