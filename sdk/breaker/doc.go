// Package breaker is cbdash's circuit breaker: it protects each call to a
// dependency, stops calling a dependency that is failing, lets a few
// probes through to see whether it has recovered, and reports everything
// it does (counters, a latency histogram, the sliding window beside its
// thresholds, and every transition with its cause) for the rest of cbdash
// to see. It uses only the standard library.
//
// The exact semantics are those of the replay scenarios in
// testdata/scenarios (FORMAT.md there is the contract).
package breaker
