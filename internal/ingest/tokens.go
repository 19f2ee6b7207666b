package ingest

import (
	"context"
	"maps"
	"slices"
)

// RevokeAgentToken revokes agent token id (see store.AgentToken.ID) as
// actor, then closes every open connection made with it, and returns how
// many it closed. New connections and ingests with the token are refused
// from the moment the store has revoked it. Errors are the store's
// (cbdash.ErrNotFound for an unknown token).
func (c *Pipeline) RevokeAgentToken(ctx context.Context, actor, id string) (closed int, err error) {
	if err := c.store.RevokeAgentToken(ctx, actor, id); err != nil {
		return 0, err
	}
	return c.CloseAgentToken(id), nil
}

// CloseAgentToken closes every open agent connection made with token id
// (see store.AgentToken.ID) and returns how many: each gets a permanent
// fatal error ("agent token revoked or expired") and close status 1008
// (within CloseGrace). The agents that reconnect are refused if the token
// is no longer valid. Safe for concurrent use.
func (c *Pipeline) CloseAgentToken(id string) int {
	c.mu.Lock()
	var hit []*session
	for s := range c.sessions {
		if s.tokenID == id {
			hit = append(hit, s)
		}
	}
	c.mu.Unlock()
	for _, s := range hit {
		s.revoked()
	}
	return len(hit)
}

// CloseRevokedSessions closes the connections whose token has been
// revoked or has expired by other means than RevokeAgentToken (the CLI,
// working on the database file, or an expiry passing): run by the sweep,
// so they end within a second.
func (c *Pipeline) CloseRevokedSessions(ctx context.Context) {
	c.mu.Lock()
	seen := make(map[string]bool, 4)
	for s := range c.sessions {
		seen[s.tokenID] = true
	}
	c.mu.Unlock()
	ids := slices.Collect(maps.Keys(seen))
	if len(ids) == 0 {
		return
	}
	live, err := c.store.LiveAgentTokens(ctx, ids, c.now())
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("checking agent tokens of open connections", "err", err)
		}
		return
	}
	for _, id := range ids {
		if !live[id] {
			c.CloseAgentToken(id)
		}
	}
}
