package ingest

import (
	"context"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Ingest takes one hello and batch from a source in the collector's own
// process (internal/source: a Hystrix stream read, a Prometheus scrape)
// and runs them through the ingest pipeline as POST /api/v1/ingest does,
// without the token (the source is configured by the operator): the hello
// is validated and registered when it changed, the batch validated,
// applied to live state and committed before Ingest returns. A source is
// thus judged, stored and made stale (when it stops calling) as an agent
// on HTTP ingest is. The hello must declare every breaker the batch
// reports; seq numbers follow the protocol (one sequence per StartedAt).
//
// The response's commands are the pending commands of the instance; a
// source whose breakers set HoldsUnsupported gets none for them. Errors:
// one wrapping cbdash.ErrInvalid for an invalid hello or batch (the same
// one is refused again); any other error is the collector's trouble (not
// Run yet or stopped, the store cannot commit now): retry later. Safe for
// concurrent use.
func (c *Pipeline) Ingest(ctx context.Context, h *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, error) {
	if !c.isReady() {
		return protocol.IngestResponse{}, retryLater(nil, "collector is not ready")
	}
	resp, rf := c.ingest(ctx, "", "", h, b)
	if rf != nil {
		return resp, rf
	}
	return resp, nil
}
