-- The tables of the collectors' bus are PostgreSQL's only (see
-- ../postgres/00041_cluster.sql): a SQLite store has one collector and no
-- bus. This version is here so that both backends record the same ones.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
