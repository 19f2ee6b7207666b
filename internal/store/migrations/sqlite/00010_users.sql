-- Dashboard accounts, their sessions and their API tokens (web helper).
-- Session and API token secrets are stored as their SHA-256 only.

-- +goose Up
CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    role          TEXT    NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    password_hash BLOB    NOT NULL, -- bcrypt
    created_at    INTEGER NOT NULL  -- Unix ms
);

CREATE TABLE sessions (
    hash       BLOB    PRIMARY KEY, -- sha256 of the cookie value
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_expires ON sessions (expires_at);

CREATE TABLE user_tokens (
    id         INTEGER PRIMARY KEY,
    hash       BLOB    NOT NULL UNIQUE, -- sha256 of the token
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    last_used  INTEGER NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE user_tokens;
DROP TABLE sessions;
DROP TABLE users;
