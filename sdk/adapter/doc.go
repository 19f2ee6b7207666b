// Package adapter holds what the adapters of other breaker libraries
// share (modules sdk/adapter/gobreaker and sdk/adapter/failsafe, each its
// own module so that this SDK needs only the standard library): a Meter,
// which counts the calls a thin wrapper around the library's Execute sees
// and delivers the transitions the library's state-change hook reports, in
// the shape an agent.Source gives the agent.
//
// An adapter for another library wraps the library's call path with
// Meter.Begin, Meter.End and Meter.Reject, calls Meter.Transition from the
// library's state-change hook, and implements agent.Source with
// Meter.Snapshot and Meter.Subscribe.
package adapter
