// Package alert watches the collector's live state with operator rules and
// tells webhooks when a breaker opens, stays half-open too long, runs out
// of headroom (its failure or slow-call rate is within a margin of the
// threshold: heading for open before it trips) or when an instance stops
// reporting.
//
// The Engine is pure logic with an injected clock: one alert per rule and
// subject fires when its condition becomes true and resolves once the
// condition has stayed false for the rule's hold period, so a flapping
// breaker sends one alert and one resolve, not dozens. The Deliverer posts
// a generic JSON body or a Slack-compatible {"text": ...} body, retries
// with exponential backoff and records every delivery. A Service runs both
// against the collector; API mounts the rules CRUD and the delivery log.
//
// A Service sends a notification only once the store has recorded it: one
// firing per rule, subject and episode, one resolve per episode. On taking
// over (a leader handover or a restart) it replays the stored trips
// received after its mark through Engine.Trip, so a trip that opened and
// closed while no leader ran fires once (since the trip's time) and
// resolves after the rule's hold; a replay or two leaders overlapping send
// nothing twice (see Service.Run).
package alert
