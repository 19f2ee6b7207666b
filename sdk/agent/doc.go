// Package agent reports a service's circuit breakers to a cbdash collector
// and applies the operator commands the collector sends back.
//
// A service makes one Agent, registers its breakers (package
// sdk/breaker) with it, starts it and closes it on shutdown:
//
//	a, err := agent.New(agent.Config{
//		URL:     "wss://cbdash.example.com/api/v1/agent",
//		Token:   os.Getenv("CBDASH_AGENT_TOKEN"),
//		Service: "checkout",
//		Labels:  map[string]string{"region": "eu-west-1", "version": "1.4.2"},
//	})
//	if err != nil { ... }
//	if err := a.Register(payments); err != nil { ... }
//	if err := a.Start(); err != nil { ... }
//	defer a.Close(shutdownCtx)
//
// The agent keeps one websocket connection to the collector (protocol
// cbdash.v1, docs/protocol.md). It pushes every transition the moment it
// happens, sends a window report per breaker every ReportInterval (deltas
// of the breaker's cumulative counters and latency histogram, calls in
// flight, state and headroom) and, for a breaker with nothing new, every
// IdleReportInterval. Batches carry a sequence number; the collector
// acknowledges what it has stored and the agent resends the rest after a
// reconnect, so nothing is lost or counted twice when the collector
// restarts or the connection drops. Given several collectors sharing one
// database (Config.URLs), the agent connects to one, starting at one picked
// by a hash of its service and instance, fails over to the next in the
// same way, and moves back to the one it started on once that one has been
// ready for Config.FailbackAfter. Between attempts it backs off
// exponentially, except where the collector says when to come back
// (retry_after_ms) or nothing listens yet (retried every second at most).
//
// The agent never slows the service down: the breakers' hot path only
// updates their counters, the agent's transition observer only queues,
// and all encoding and I/O happen on the agent's goroutines. What it holds
// for the collector is bounded by Config.BufferBytes; under pressure it
// merges, then drops, the oldest window reports and keeps transitions and
// command results, counting whatever it loses (Stats, Batch.Dropped).
//
// Unregister stops reporting a breaker (a breaker.Transport's OnEvict
// calls it for the per-host breakers it evicts): its last counts are
// still delivered, and the collector forgets the breaker once they are.
//
// Commands (force open, force closed, release, reset) are applied to the
// named breaker at most once per command id and answered with the
// resulting state or with the reason they were refused.
package agent
