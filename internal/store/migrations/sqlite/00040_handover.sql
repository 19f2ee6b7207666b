-- Handover of the singletons (issue 28): how far the leader of incident
-- detection and of alert delivery has processed the stored transitions,
-- so that the next leader (or the same collector after a restart) replays
-- what came after; and the keys that make a replay, or two leaders
-- overlapping for a moment, store an incident or an alert once.
-- Times are Unix milliseconds.

-- +goose Up
CREATE TABLE leader_marks (
    name        TEXT    PRIMARY KEY, -- the singleton: 'incidents', 'alerts'
    received_ms INTEGER NOT NULL     -- every transition received before it was processed
) WITHOUT ROWID;

-- The replay reads transitions by the time the collector received them.
CREATE INDEX transitions_received ON transitions (received_at);

-- An incident's episode key: its start when it was created (NULL for
-- incidents stored before this migration). A second insert of the same
-- dependency and episode start is "already exists".
ALTER TABLE incidents ADD COLUMN episode_ms INTEGER;
CREATE UNIQUE INDEX incidents_episode ON incidents (service, breaker, episode_ms);

-- Alert episodes that resolved: a replayed trip inside one fires nothing.
CREATE TABLE alert_episodes (
    rule_id     INTEGER NOT NULL,
    subject     TEXT    NOT NULL,
    since_ms    INTEGER NOT NULL,
    resolved_ms INTEGER NOT NULL,
    PRIMARY KEY (rule_id, subject, since_ms)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE alert_episodes;
DROP INDEX incidents_episode;
ALTER TABLE incidents DROP COLUMN episode_ms;
DROP INDEX transitions_received;
DROP TABLE leader_marks;
