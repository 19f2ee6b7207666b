-- PostgreSQL twin of ../sqlite/00056_window_writers.sql.
-- Issue 36: the windows tables get a writer column in their primary key
-- (dep_id, start, writer): each store process writes rows of its own
-- writer id only (nextval of store_writers at Open), so several
-- processes on one schema never touch the same row and their batch
-- transactions need not take turns (see doc.go, Several writers). The
-- rows written before keep the id 0, the id of the roll-ups (Compact).
-- Down refuses a table that holds rows of another writer than 0 (they
-- would collide in the old key): compact them away first.

-- +goose Up
CREATE SEQUENCE store_writers START 1;

ALTER TABLE windows_second ADD COLUMN writer BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_second DROP CONSTRAINT windows_second_pkey;
ALTER TABLE windows_second ADD PRIMARY KEY (dep_id, start, writer);

ALTER TABLE windows_minute ADD COLUMN writer BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_minute DROP CONSTRAINT windows_minute_pkey;
ALTER TABLE windows_minute ADD PRIMARY KEY (dep_id, start, writer);

ALTER TABLE windows_hour ADD COLUMN writer BIGINT NOT NULL DEFAULT 0;
ALTER TABLE windows_hour DROP CONSTRAINT windows_hour_pkey;
ALTER TABLE windows_hour ADD PRIMARY KEY (dep_id, start, writer);

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM windows_second WHERE writer <> 0)
        OR EXISTS (SELECT 1 FROM windows_minute WHERE writer <> 0)
        OR EXISTS (SELECT 1 FROM windows_hour WHERE writer <> 0) THEN
        RAISE EXCEPTION 'the windows tables hold rows of writers other than 0: a version before 00056 cannot read them';
    END IF;
END
$$;
-- +goose StatementEnd

ALTER TABLE windows_hour DROP CONSTRAINT windows_hour_pkey;
ALTER TABLE windows_hour DROP COLUMN writer;
ALTER TABLE windows_hour ADD PRIMARY KEY (dep_id, start);

ALTER TABLE windows_minute DROP CONSTRAINT windows_minute_pkey;
ALTER TABLE windows_minute DROP COLUMN writer;
ALTER TABLE windows_minute ADD PRIMARY KEY (dep_id, start);

ALTER TABLE windows_second DROP CONSTRAINT windows_second_pkey;
ALTER TABLE windows_second DROP COLUMN writer;
ALTER TABLE windows_second ADD PRIMARY KEY (dep_id, start);

DROP SEQUENCE store_writers;
