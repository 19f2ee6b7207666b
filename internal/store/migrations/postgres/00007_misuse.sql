-- PostgreSQL twin of ../sqlite/00007_misuse.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Misuse (protocol Counts.Misuse: a second end of one call, ignored by
-- the breaker), summed like every other count at the three resolutions.

-- +goose Up
ALTER TABLE windows_second ADD COLUMN misuse BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_minute ADD COLUMN misuse BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_hour ADD COLUMN misuse BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE windows_hour DROP COLUMN misuse;
ALTER TABLE windows_minute DROP COLUMN misuse;
ALTER TABLE windows_second DROP COLUMN misuse;
