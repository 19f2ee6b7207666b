-- Account and token lifecycle (issue 13): users can be disabled, user API
-- tokens and agent tokens can expire, and every change to accounts and
-- tokens is kept in an append-only account log.

-- +goose Up
ALTER TABLE users ADD COLUMN disabled_at INTEGER NOT NULL DEFAULT 0; -- Unix ms; 0 = enabled
ALTER TABLE user_tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0; -- Unix ms; 0 = never
ALTER TABLE agent_tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0; -- Unix ms; 0 = never

CREATE TABLE account_events (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL,           -- Unix ms
    actor   TEXT    NOT NULL,           -- user name, or "cli" for the command line on the server's machine
    action  TEXT    NOT NULL,           -- cbdash.Account* constants
    subject TEXT    NOT NULL,           -- user name or token ID
    detail  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX account_events_at ON account_events (at);

-- +goose StatementBegin
CREATE TRIGGER account_events_append_only BEFORE DELETE ON account_events
BEGIN
    SELECT RAISE(ABORT, 'the account log is append-only');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER account_events_append_only;
DROP TABLE account_events;
ALTER TABLE agent_tokens DROP COLUMN expires_at;
ALTER TABLE user_tokens DROP COLUMN expires_at;
ALTER TABLE users DROP COLUMN disabled_at;
