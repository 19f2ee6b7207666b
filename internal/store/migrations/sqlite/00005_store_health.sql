-- One row, rewritten by Store.Writable to learn whether the store can
-- still commit (a read-only file or file system, a full disk).

-- +goose Up
CREATE TABLE store_health (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE store_health;
