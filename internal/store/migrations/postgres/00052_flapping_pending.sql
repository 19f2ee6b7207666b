-- Issue 33: an alert's flapping message is pending (flapping_pending 1,
-- its summary in flapping_now) from its claim until its webhook call
-- completes, as a firing or a resolve is (pending): the next leader sends
-- it again when the one that claimed it stopped before.

-- +goose Up
ALTER TABLE alert_firing ADD COLUMN flapping_pending BIGINT NOT NULL DEFAULT 0;
ALTER TABLE alert_firing ADD COLUMN flapping_now TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE alert_firing DROP COLUMN flapping_now;
ALTER TABLE alert_firing DROP COLUMN flapping_pending;
