// Package live is the live state of every breaker of every instance the
// collector serves, and of the fleet's other instances one summary per
// dependency and serving collector: per-dependency aggregation, the views
// dashboards read, and the hub that fans every change out to subscribers
// (snapshot-and-subscribe). It does no I/O: no storage, no HTTP, no wire
// protocol of its own; internal/ingest feeds it validated hellos and
// batches, the collector (internal/collector) wires it and carries the
// summaries and transitions between collectors.
//
// What holds per-instance detail (issue 36, summary.go): a dependency's
// view counts every instance of the fleet (Instances, Stale, ByState,
// State, Recent and the rates, percentiles, Headroom, Held, OpenSince,
// OpensToday, LastChange), but its PerInstance lines, Instances() and
// Instance() are of the instances served here only (and those of the
// Config.FullDetail dependencies: a quorum rule's, which the leader's
// advisor reads line by line). Consumers of lines decide as follows:
// the dependency page, the dependency API, per_instance of
// GET /api/v1/breakers and a command's targets read the members served
// elsewhere from the store (collector.Collector.Dependency); the holds
// read Instances() to apply a hold to the instances connected here, as
// each collector does for its own; the quorum advisor reads full lines
// (FullDetail); incidents and alerts count from the view's totals and
// name instances from transitions, which every collector publishes, and
// from the lines they have (those served by the leader).
//
// Live state (see Dependency in package cbdash) is aggregated per
// dependency (service + breaker name) across instances: instances by
// state, counts summed over the last minute with rates recomputed from
// the sums, percentiles from merged latency histograms, the headroom of
// the instance closest to opening, the operator hold kept apart from the
// computed state, and configuration drift between instances. An instance
// that stops reporting is stale after Config.StaleAfter (it no longer
// counts in its dependency's state, so it never keeps a stale "open") and
// is forgotten after Config.GoneAfter, unless it is connected.
//
// A batch is applied to live state as soon as it has been validated,
// before it is committed, so that a transition reaches dashboards without
// waiting for the disk. It is applied at most once per instance run (by
// sequence number), so resent batches never count twice. Batches queued
// by the connections (Enqueue) are applied by one goroutine (ApplyLoop),
// their transitions on a short path ahead of any window report.
//
// Publishing to subscribers never blocks ingest: each subscriber has a
// bounded queue and a subscriber that falls behind is dropped (its channel
// is closed). Events are published under live state's lock, which is what
// makes a subscriber's snapshot and its event stream neither overlap nor
// leave a gap.
package live
