-- The overview's fleet timeline (Store.FleetNotClosed) counts, per minute
-- of the last hour, the instance minutes that were not closed. Through
-- instance_minutes_minute it read every row of the hour, 1.2 million at
-- 1,000 instances x 20 breakers (0.74 s, BenchmarkFleetNotClosedHour);
-- this index holds only the rows that were open, half-open or forced open
-- (cbdash.StateRank 0, 1, 2; the query says state_rank < 3 as the index
-- does, so that the planner may use it), so it costs the table nearly
-- nothing while the fleet is closed.

-- +goose Up
CREATE INDEX instance_minutes_not_closed ON instance_minutes (minute, dep_id, instance_id) WHERE state_rank < 3;

-- +goose Down
DROP INDEX instance_minutes_not_closed;
