-- Agent tokens: only the SHA-256 of each token is stored.

-- +goose Up
CREATE TABLE agent_tokens (
    hash       BLOB    PRIMARY KEY, -- sha256 of the token
    service    TEXT    NOT NULL DEFAULT '', -- '' = any service
    created_at INTEGER NOT NULL,
    last_used  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- +goose Down
DROP TABLE agent_tokens;
