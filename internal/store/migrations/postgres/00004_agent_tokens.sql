-- PostgreSQL twin of ../sqlite/00004_agent_tokens.sql: same version, same tables; BIGINT for
-- integers (Unix ms do not fit INTEGER), DOUBLE PRECISION, BYTEA, identity ids.
-- Agent tokens: only the SHA-256 of each token is stored.

-- +goose Up
CREATE TABLE agent_tokens (
    hash       BYTEA    PRIMARY KEY, -- sha256 of the token
    service    TEXT    NOT NULL DEFAULT '', -- '' = any service
    created_at BIGINT NOT NULL,
    last_used  BIGINT NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE agent_tokens;
