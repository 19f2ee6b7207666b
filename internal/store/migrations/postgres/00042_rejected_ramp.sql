-- PostgreSQL twin of ../sqlite/00042_rejected_ramp.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Ramp rejections (protocol Counts.RejectedRamp: calls a breaker ramping up
-- after a recovery did not admit yet), summed like every other count at
-- the three resolutions.

-- +goose Up
ALTER TABLE windows_second ADD COLUMN rejected_ramp BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_minute ADD COLUMN rejected_ramp BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_hour ADD COLUMN rejected_ramp BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE windows_hour DROP COLUMN rejected_ramp;
ALTER TABLE windows_minute DROP COLUMN rejected_ramp;
ALTER TABLE windows_second DROP COLUMN rejected_ramp;
