// Package incident turns a dependency's breaker transitions into incidents
// and explains them afterwards.
//
// A Detector is pure logic: it is fed the collector's live events
// (transitions and dependency snapshots) and a clock, and says when an
// incident opens, grows and closes. An incident opens when a dependency's
// breaker opens on any instance (or on a configured share of its live
// instances) and closes when every instance is closed again and has stayed
// closed for a quiet period (2 minutes by default); openings of the same
// dependency within the quiet period merge into the incident.
//
// A Service runs a Detector against the collector and stores what it finds.
// Build assembles an incident's report from stored history, transitions
// and commands: the summary, one lane per instance, the timeline, and the
// Markdown and JSON exports. API mounts the JSON endpoints.
package incident
