-- The overview's fleet timeline (Store.FleetNotClosed) counts, per minute
-- of the last hour, the instance minutes that were not closed. Through
-- instance_minutes_minute it read every row of the hour, 1.2 million at
-- 1,000 instances x 20 breakers (0.74 s, BenchmarkFleetNotClosedHour);
-- this index, led by the state and covering the dependency, reads only
-- the rows that were open, half-open or forced open.

-- +goose Up
CREATE INDEX instance_minutes_by_state ON instance_minutes (state_rank, minute, dep_id);

-- +goose Down
DROP INDEX instance_minutes_by_state;
