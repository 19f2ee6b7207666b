-- Shadow settings (issue 31): the would-be transitions of a breaker's
-- shadow configurations (sdk/breaker Config.Shadows, batch
-- shadow_transitions), never enforced. A table of their own, so that no
-- reader of transitions (breaker state, incidents, alerts, trips and
-- opens today, quorum, holds, history) can take one for a live
-- transition: only the readers that ask for shadows see them.

-- +goose Up
CREATE TABLE shadow_transitions (
    id          INTEGER PRIMARY KEY,
    service     TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    breaker     TEXT    NOT NULL,
    shadow      TEXT    NOT NULL, -- the shadow configuration's name
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    cause       TEXT    NOT NULL, -- protocol.Cause as JSON
    open_ms     INTEGER NOT NULL DEFAULT 0,
    received_at INTEGER NOT NULL
);
CREATE INDEX shadow_transitions_at ON shadow_transitions (at);
CREATE INDEX shadow_transitions_dep_at ON shadow_transitions (service, breaker, at);

-- +goose Down
DROP TABLE shadow_transitions;
