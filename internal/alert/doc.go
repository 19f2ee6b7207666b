// Package alert watches the collector's live state with operator rules and
// tells webhooks when a breaker opens, stays half-open too long, runs out
// of headroom (its failure or slow-call rate is within a margin of the
// threshold: heading for open before it trips) or when an instance stops
// reporting.
//
// The Engine is pure logic with an injected clock: one alert per rule and
// subject fires when its condition becomes true and resolves once the
// condition has stayed false for the rule's hold period, so a flapping
// breaker sends one alert and one resolve, not dozens; a breaker opening
// more than FlapCount times in FlapWindow sends one flapping message and
// one resolve when it settles (flap.go). A headroom alert follows its
// breaker: it keeps firing while the breaker is open (follow.go), and
// every resolve says what the subject is now. The Deliverer posts a
// generic JSON body, a Slack incoming-webhook body or a PagerDuty Events
// v2 event (formats.go), linking to the dashboard (Config.ExternalURL),
// retries with exponential backoff and records every delivery. A Service
// runs both against the collector, holds back what a silence matches
// (silence.go) and batches a grouped rule's messages (group.go, after
// Alertmanager's group_by, group_wait and group_interval).
//
// A Service sends a notification only once the store has recorded it: one
// firing per rule, subject and episode, one resolve per episode. On taking
// over (a leader handover or a restart) it replays the stored trips
// received after its mark through Engine.Trip, so a trip that opened and
// closed while no leader ran fires once (since the trip's time) and
// resolves after the rule's hold; a replay or two leaders overlapping send
// nothing twice (see Service.Run).
package alert
