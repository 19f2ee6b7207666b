-- PostgreSQL twin of ../sqlite/00003_commands.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Operator commands and their per-instance results: the audit log. Rows are
-- never deleted (triggers refuse it); retention does not touch them.

-- +goose Up
-- refuse_delete is the append-only triggers' function: it refuses the
-- DELETE with the message given as the trigger's argument.
-- +goose StatementBegin
CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'restrict_violation';
END;
$$;
-- +goose StatementEnd

CREATE TABLE commands (
    id         TEXT    PRIMARY KEY,
    service    TEXT    NOT NULL,
    breaker    TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    instance   TEXT    NOT NULL DEFAULT '',
    share      DOUBLE PRECISION NOT NULL DEFAULT 0,
    ttl_ms     BIGINT NOT NULL DEFAULT 0,
    reason     TEXT    NOT NULL DEFAULT '',
    actor      TEXT    NOT NULL DEFAULT '',
    issued_at  BIGINT NOT NULL,
    expires_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX commands_issued ON commands (issued_at);
CREATE INDEX commands_dep ON commands (service, breaker, issued_at);

CREATE TABLE command_targets (
    command_id TEXT    NOT NULL REFERENCES commands (id),
    instance   TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    state      TEXT    NOT NULL DEFAULT '',
    error      TEXT    NOT NULL DEFAULT '',
    at         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (command_id, instance)
);
CREATE INDEX command_targets_pending ON command_targets (instance, status);

CREATE TRIGGER commands_append_only BEFORE DELETE ON commands
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('the command audit log is append-only');

CREATE TRIGGER command_targets_append_only BEFORE DELETE ON command_targets
    FOR EACH ROW EXECUTE FUNCTION refuse_delete('the command audit log is append-only');

-- +goose Down
DROP TRIGGER command_targets_append_only ON command_targets;
DROP TRIGGER commands_append_only ON commands;
DROP TABLE command_targets;
DROP TABLE commands;
DROP FUNCTION refuse_delete();
