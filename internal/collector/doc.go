// Package collector is the server side of the cbdash wire protocol: it
// accepts agent connections (websocket GET /api/v1/agent and
// POST /api/v1/ingest), validates every message, stores batches through the
// store and acknowledges them only after they are committed, keeps the live
// state of every breaker across every instance, fans live changes out to
// dashboard subscribers, and routes operator commands to instances.
//
// It serves no route itself: internal/web mounts every HTTP route over its
// plain methods (Dependencies, History, Issue, CreateHold, Readiness, ...,
// each audited action with an explicit cbdash.Actor) and over its
// transports, which are net/http handlers that return the error to answer
// (ServeAgent, ServeIngest, ServeEvents, ServeMetrics), so the server's
// one error handler maps every refusal. The package does not import the
// HTTP framework.
//
// Live state (see Dependency in package cbdash) is aggregated per
// dependency (service + breaker name) across instances: instances by state,
// counts summed over the last minute with rates recomputed from the sums,
// percentiles from merged latency histograms, the headroom of the instance
// closest to opening, the operator hold kept apart from the computed state,
// and configuration drift between instances. An instance that stops
// reporting is stale after Config.StaleAfter (it no longer counts in its
// dependency's state, so it never keeps a stale "open") and is forgotten
// after Config.GoneAfter.
//
// Live state is updated as soon as a batch has been validated, before it is
// committed, so that a transition reaches dashboards without waiting for the
// disk; the ack waits for the commit. A batch is applied to live state at
// most once per instance run (by sequence number), so resent batches never
// count twice.
//
// Publishing to subscribers never blocks ingest: each subscriber has a
// bounded channel and a subscriber that falls behind is dropped (its channel
// is closed).
package collector
