-- Operator commands and their per-instance results: the audit log. Rows are
-- never deleted (triggers refuse it); retention does not touch them.

-- +goose Up
CREATE TABLE commands (
    id         TEXT    PRIMARY KEY,
    service    TEXT    NOT NULL,
    breaker    TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    instance   TEXT    NOT NULL DEFAULT '',
    share      REAL    NOT NULL DEFAULT 0,
    ttl_ms     INTEGER NOT NULL DEFAULT 0,
    reason     TEXT    NOT NULL DEFAULT '',
    actor      TEXT    NOT NULL DEFAULT '',
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX commands_issued ON commands (issued_at);
CREATE INDEX commands_dep ON commands (service, breaker, issued_at);

CREATE TABLE command_targets (
    command_id TEXT    NOT NULL REFERENCES commands (id),
    instance   TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    state      TEXT    NOT NULL DEFAULT '',
    error      TEXT    NOT NULL DEFAULT '',
    at         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (command_id, instance)
) WITHOUT ROWID;
CREATE INDEX command_targets_pending ON command_targets (instance, status);

-- +goose StatementBegin
CREATE TRIGGER commands_append_only BEFORE DELETE ON commands
BEGIN
    SELECT RAISE(ABORT, 'the command audit log is append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER command_targets_append_only BEFORE DELETE ON command_targets
BEGIN
    SELECT RAISE(ABORT, 'the command audit log is append-only');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER command_targets_append_only;
DROP TRIGGER commands_append_only;
DROP TABLE command_targets;
DROP TABLE commands;
