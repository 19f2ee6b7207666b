-- Misuse (protocol Counts.Misuse: a second end of one call, ignored by
-- the breaker), summed like every other count at the three resolutions.

-- +goose Up
ALTER TABLE windows_second ADD COLUMN misuse INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows_minute ADD COLUMN misuse INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows_hour ADD COLUMN misuse INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE windows_hour DROP COLUMN misuse;
ALTER TABLE windows_minute DROP COLUMN misuse;
ALTER TABLE windows_second DROP COLUMN misuse;
