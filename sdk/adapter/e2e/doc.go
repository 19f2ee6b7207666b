// Package e2e holds only tests: the breaker adapters (sdk/adapter/gobreaker,
// sdk/adapter/failsafe) wrapping real sony/gobreaker and failsafe-go
// breakers, reported by a real agent to a real collector (internal/collector
// on a SQLite file, over loopback). It is its own module so that neither the
// server module nor the SDK depends on those libraries.
package e2e
