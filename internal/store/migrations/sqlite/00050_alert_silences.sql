-- Issue 33: flap detection of open rules (alert_rules.flap_count and
-- flap_window_ms, 0 = the defaults of internal/alert), the grouping of a
-- rule's notifications (group_by, group_wait_ms, group_interval_ms), the flapping
-- message and the acknowledgement of a firing alert (alert_firing), and
-- silences: matchers on service, breaker and labels (matchers is a JSON
-- object {"service": ..., "breaker": ..., "labels": {...}}, '' or absent
-- matching any), an end, a reason, who created and who expired each.
-- Silences are never deleted: the table is their audit trail.

-- +goose Up
ALTER TABLE alert_rules ADD COLUMN flap_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alert_rules ADD COLUMN flap_window_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alert_rules ADD COLUMN group_by TEXT NOT NULL DEFAULT '';
ALTER TABLE alert_rules ADD COLUMN group_wait_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alert_rules ADD COLUMN group_interval_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alert_firing ADD COLUMN flapping_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alert_firing ADD COLUMN acked_by TEXT NOT NULL DEFAULT '';
ALTER TABLE alert_firing ADD COLUMN acked_ms INTEGER NOT NULL DEFAULT 0;

CREATE TABLE alert_silences (
    id         INTEGER PRIMARY KEY,
    matchers   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    created_by TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    starts_ms  INTEGER NOT NULL,
    ends_ms    INTEGER NOT NULL,
    expired_by TEXT    NOT NULL DEFAULT '',
    expired_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX alert_silences_ends ON alert_silences (ends_ms);

-- +goose Down
DROP TABLE alert_silences;
ALTER TABLE alert_firing DROP COLUMN acked_ms;
ALTER TABLE alert_firing DROP COLUMN acked_by;
ALTER TABLE alert_firing DROP COLUMN flapping_ms;
ALTER TABLE alert_rules DROP COLUMN group_interval_ms;
ALTER TABLE alert_rules DROP COLUMN group_wait_ms;
ALTER TABLE alert_rules DROP COLUMN group_by;
ALTER TABLE alert_rules DROP COLUMN flap_window_ms;
ALTER TABLE alert_rules DROP COLUMN flap_count;
