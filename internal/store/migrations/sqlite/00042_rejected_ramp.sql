-- Ramp rejections (protocol Counts.RejectedRamp: calls a breaker ramping up
-- after a recovery did not admit yet), summed like every other count at
-- the three resolutions.

-- +goose Up
ALTER TABLE windows_second ADD COLUMN rejected_ramp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows_minute ADD COLUMN rejected_ramp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows_hour ADD COLUMN rejected_ramp INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE windows_hour DROP COLUMN rejected_ramp;
ALTER TABLE windows_minute DROP COLUMN rejected_ramp;
ALTER TABLE windows_second DROP COLUMN rejected_ramp;
