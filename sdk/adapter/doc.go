// Package adapter holds what the adapters of other breaker libraries
// share (modules sdk/adapter/gobreaker, sdk/adapter/failsafe and
// sdk/adapter/hystrixgo, each its own module so that this SDK needs only
// the standard library): a Meter, which counts the calls a thin wrapper
// around the library's Execute sees (or the library reports) and delivers
// the transitions the library's state-change hook reports, in the shape an
// agent.Source gives the agent.
//
// An adapter for another library wraps the library's call path with
// Meter.Begin, Meter.End and Meter.Reject (or, when the library reports
// each call's outcome and duration after the fact, as hystrix-go's metric
// collectors are told, counts it with Meter.Record, Meter.Reject and
// Meter.Fallback), calls Meter.Transition from the library's state-change
// hook, and implements agent.Source with Meter.Snapshot and
// Meter.Subscribe.
package adapter
