-- PostgreSQL twin of ../sqlite/00005_store_health.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- One row, rewritten by Store.Writable to learn whether the store can
-- still commit (a read-only file or file system, a full disk).

-- +goose Up
CREATE TABLE store_health (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    checked_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE store_health;
