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
// It works from the stored transitions past a mark it keeps in the store:
// on taking over (a leader handover, or a restart: same rule) it rebuilds
// the open incidents from their stored transitions and replays those
// received after the mark (Detector.Resume) before it follows the live
// feed, so trips made while no leader ran get their incident, and an
// incident ends at its last instance's stored close. The store keeps one
// incident per dependency and episode start, so a replay or two leaders
// overlapping make none twice (see Service.Run).
// Build assembles an incident's report from stored history, transitions
// and commands: the summary, one lane per instance, the timeline, and the
// Markdown and JSON exports. API mounts the JSON endpoints.
package incident
