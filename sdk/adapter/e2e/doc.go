// Package e2e holds only tests: the breaker adapters (sdk/adapter/gobreaker,
// sdk/adapter/failsafe, sdk/adapter/hystrixgo) with real sony/gobreaker,
// failsafe-go and afex/hystrix-go breakers, reported by a real agent to a
// real collector (internal/collector on a SQLite file, over loopback). It
// is its own module so that neither the server module nor the SDK depends
// on those libraries. (hystrix-go starts goroutines it never stops, one
// per command, so this module has no goleak check; the adapters' modules
// have one.)
package e2e
