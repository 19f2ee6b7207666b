// Package tune answers "what should my breaker's thresholds be?" from
// stored history (issue 31): it replays a dependency's recorded traffic
// through the real sdk/breaker state machine, on a virtual clock
// (breakertest.Clock), under the live settings and under candidates, and
// scores each run: trips, time open, calls rejected, calls into a
// failing dependency, detection time, flaps and likely false trips.
//
// The traffic replayed is that of a typical instance: each second of the
// dependency's per-second history (store's windows_second, read through
// History) divided among the instances that reported it (Typical). What
// is estimated is said: calls the live breakers rejected were never seen
// and are filled (Typical, Report.Estimated), and the order of calls
// within a second is lost (NoteOrder).
//
// A replay never blocks ingest: it only reads history, at most
// Service's slots at once, each within its time budget.
//
// Not here yet: shadow settings on live calls (issue 31's third bullet)
// wait for the work on sdk/breaker's call path.
package tune
