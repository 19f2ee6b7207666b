// Package demo is cbdash's simulated fleet: real HTTP dependency servers on
// loopback that follow a looping fault script, and real services (several
// instances each) that call them through sdk/breaker's RoundTripper and
// report through sdk/agent to a collector.
//
// The fault script is data: a table of phases (healthy, creeping latency,
// error bursts, outage, slow recovery, business errors) with durations,
// evaluated against an injected clock so tests can step it. Each dependency
// runs the same script at its own offset, so within the first minute every
// breaker state and every transition cause appears somewhere in the fleet.
package demo
