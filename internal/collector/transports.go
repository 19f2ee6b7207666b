package collector

import (
	"context"
	"net/http"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// The agents' transports are internal/ingest's; the collector serves
// them as its own.

// ServeAgent serves GET /api/v1/agent, the agents' websocket (see
// ingest.Pipeline.ServeAgent): before Run has restored live state, an
// error wrapping cbdash.ErrUnavailable, nothing written; once the
// websocket is accepted, nil at once, the session going on until the
// agent, a refusal or Run's return ends it.
func (c *Collector) ServeAgent(w http.ResponseWriter, r *http.Request) error {
	return c.ing.ServeAgent(w, r)
}

// ServeIngest serves POST /api/v1/ingest (see
// ingest.Pipeline.ServeIngest for the answers and the errors).
func (c *Collector) ServeIngest(w http.ResponseWriter, r *http.Request) error {
	return c.ing.ServeIngest(w, r)
}

// Ingest takes one hello and batch from a source in the server's own
// process as POST /api/v1/ingest does, without the token (see
// ingest.Pipeline.Ingest). Errors: one wrapping cbdash.ErrInvalid for an
// invalid hello or batch; any other is the collector's trouble: retry
// later.
func (c *Collector) Ingest(ctx context.Context, h *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, error) {
	return c.ing.Ingest(ctx, h, b)
}

// RevokeAgentToken revokes agent token id as actor and closes every open
// connection made with it, returning how many (see
// ingest.Pipeline.RevokeAgentToken). Errors are the store's
// (cbdash.ErrNotFound for an unknown token).
func (c *Collector) RevokeAgentToken(ctx context.Context, actor, id string) (closed int, err error) {
	return c.ing.RevokeAgentToken(ctx, actor, id)
}

// CloseAgentToken closes every open agent connection made with token id
// and returns how many (see ingest.Pipeline.CloseAgentToken).
func (c *Collector) CloseAgentToken(id string) int { return c.ing.CloseAgentToken(id) }
