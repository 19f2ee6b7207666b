// Package collector is the server side of the cbdash wire protocol: it
// accepts agent connections (websocket GET /api/v1/agent and
// POST /api/v1/ingest), validates every message, stores batches through the
// store and acknowledges them only after they are committed, feeds the live
// state of every breaker across every instance (internal/live), which fans
// live changes out to dashboard subscribers, and routes operator commands
// to instances.
//
// It serves no route itself: internal/web mounts every HTTP route over its
// plain methods (Dependencies, History, Issue, CreateHold, Readiness, ...,
// each audited action with an explicit cbdash.Actor) and over its
// transports, which are net/http handlers that return the error to answer
// (ServeAgent, ServeIngest, ServeEvents, ServeMetrics), so the server's
// one error handler maps every refusal. The package does not import the
// HTTP framework.
//
// Live state (per-dependency aggregation, the views, the hub that fans
// changes out to subscribers) is internal/live's: the collector feeds it
// each validated hello and batch, before the batch is committed, so that
// a transition reaches dashboards without waiting for the disk; the ack
// waits for the commit.
package collector
