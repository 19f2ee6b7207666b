-- The tables of the collectors' bus (internal/cluster, PostgreSQL only;
-- see docs/scaling.md): payloads too large or not text for a NOTIFY,
-- sent by reference, and the route of each connected instance to the
-- collector holding it. Its twin ../sqlite/00041_cluster.sql is empty: a
-- SQLite store has one collector and no bus.
--
-- Builds before this migration created these tables from cluster.Open
-- (CREATE TABLE IF NOT EXISTS): IF NOT EXISTS here adopts them as they
-- are. The advisory lock (the key those builds took, fnv-64a of
-- "cbdash/schema") serialises two collectors migrating at once, whose
-- concurrent CREATE TABLE IF NOT EXISTS could fail.

-- +goose Up
SELECT pg_advisory_xact_lock(8765455967455728650);

CREATE TABLE IF NOT EXISTS cbdash_cluster_payloads (
    id         BIGSERIAL   PRIMARY KEY,
    body       BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS cbdash_cluster_routes (
    service       TEXT        NOT NULL,
    instance      TEXT        NOT NULL,
    node          TEXT        NOT NULL, -- cluster.Config.NodeID of the collector holding the instance
    pid           INTEGER     NOT NULL, -- with backend_start: its listening connection in pg_stat_activity
    backend_start TIMESTAMPTZ NOT NULL,
    claimed_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (service, instance)
);

-- +goose Down
DROP TABLE IF EXISTS cbdash_cluster_routes;
DROP TABLE IF EXISTS cbdash_cluster_payloads;
