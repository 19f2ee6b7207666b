package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// agentTokenPrefix marks cbdash agent tokens (so a leaked one is easy to
// recognise in logs and scanners).
const agentTokenPrefix = "cbdash_at_"

// tokenTouchEvery limits how often a token's last-used time is written.
const tokenTouchEvery = time.Minute

func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateAgentToken creates an agent token limited to service ("" = any
// service) and returns it; it is shown once: only its SHA-256 is stored
// (enough for a random 130-bit secret, see newSecret).
// Errors: ErrClosed, ctx's or a wrapped driver error.
func (s *Store) CreateAgentToken(ctx context.Context, service string) (string, error) {
	token, err := newSecret(agentTokenPrefix)
	if err != nil {
		return "", err
	}
	now := ms(s.opts.Clock.Now())
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		if _, err := x.exec("INSERT INTO agent_tokens (hash, service, created_at) VALUES ($1, $2, $3)",
			hashToken(token), service, now); err != nil {
			return fmt.Errorf("store: create token: %w", err)
		}
		return nil
	}})
	if err != nil {
		return "", err
	}
	return token, nil
}

// CheckAgentToken returns the service the token is limited to ("" = any
// service). Its last-used time is recorded in the background, at most once
// a minute. Errors: cbdash.ErrUnauthorized for an unknown, revoked or
// expired token, ctx's or a wrapped driver error.
func (s *Store) CheckAgentToken(ctx context.Context, token string) (string, error) {
	h := hashToken(token)
	var service string
	var lastUsed int64
	now := ms(s.opts.Clock.Now())
	err := s.rdb.QueryRowContext(ctx, "SELECT service, last_used FROM agent_tokens WHERE hash = $1 AND (expires_at = 0 OR expires_at > $2)",
		h, now).Scan(&service, &lastUsed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("%w: unknown, revoked or expired agent token", cbdash.ErrUnauthorized)
	case err != nil:
		return "", fmt.Errorf("store: check token: %w", err)
	}
	if now-lastUsed >= tokenTouchEvery.Milliseconds() {
		// Best effort: dropped when the writer is saturated.
		s.w.try(&op{run: func(x *wtx) error {
			_, err := x.exec("UPDATE agent_tokens SET last_used = "+x.w.d.greatest("last_used", "$1")+" WHERE hash = $2", now, h)
			return err
		}})
	}
	return service, nil
}

// jsonStrings encodes values as a JSON array, for IN (SELECT value FROM
// dialect.jsonEach) with any number of values.
func jsonStrings(v []any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// agentTokenID spells the AgentToken.ID of an agent_tokens row: the
// lower-case hex of the first 8 bytes of its hash.
func (d *dialect) agentTokenID() string { return d.lowerHex("substr(hash, 1, 8)") }

// AgentToken describes a stored agent token; the token itself is never
// stored and cannot be listed.
type AgentToken struct {
	// ID names the token for listing and revoking: the first 8 bytes of
	// its SHA-256 in hex (the hash of a random 130-bit secret reveals
	// nothing of it).
	ID        string    `json:"id"`
	Service   string    `json:"service"` // "" = any service
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used"`  // zero = never; updated at most once a minute
	ExpiresAt time.Time `json:"expires_at"` // zero = never
}

// AgentTokens lists the agent tokens, oldest first. Errors: ctx's or a
// wrapped driver error.
func (s *Store) AgentTokens(ctx context.Context) ([]AgentToken, error) {
	rows, err := s.rdb.QueryContext(ctx, "SELECT "+s.rdb.d.agentTokenID()+", service, created_at, last_used, expires_at FROM agent_tokens ORDER BY created_at, hash")
	if err != nil {
		return nil, fmt.Errorf("store: agent tokens: %w", err)
	}
	defer rows.Close()
	out := []AgentToken{}
	for rows.Next() {
		var t AgentToken
		var created, used, expires int64
		if err := rows.Scan(&t.ID, &t.Service, &created, &used, &expires); err != nil {
			return nil, fmt.Errorf("store: agent tokens: %w", err)
		}
		t.CreatedAt, t.LastUsed, t.ExpiresAt = fromMs(created), fromMs(used), fromMs(expires)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: agent tokens: %w", err)
	}
	return out, nil
}
