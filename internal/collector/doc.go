// Package collector is the server side of the cbdash wire protocol, as
// the pieces that do the work are wired: the ingest pipeline and the
// agents' transports (internal/ingest: websocket GET /api/v1/agent and
// POST /api/v1/ingest; every message validated, every batch stored and
// acknowledged only after its commit), the live state of every breaker
// across every instance and its subscribers (internal/live), holds and
// drills (internal/holds, which it hands the instances, their connections
// and the store), and, here, operator commands routed to instances, the
// collectors of a fleet (fleet.go), the background loops (Run) and the
// metrics.
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
// changes out to subscribers) is internal/live's: the ingest pipeline feeds it
// each validated hello and batch, before the batch is committed, so that
// a transition reaches dashboards without waiting for the disk; the ack
// waits for the commit.
package collector
