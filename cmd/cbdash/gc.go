package main

import "runtime/debug"

// serveGOGC is the garbage collector's target percentage `cbdash serve`
// runs with when GOGC is not in its environment: the runtime collects
// once the heap has grown by half of what is live, instead of by all of
// it (Go's default, 100).
//
// The collector's heap is mostly long-lived (every breaker's live state
// and last window, each connection's session) and it allocates one
// decoded window and one line per window report, so with 100 the process
// holds about three times its live heap. Measured with cbdash loadgen
// (docs/benchmarks.md, issue 15's eighth round): at 1,000 agents x 20
// breakers RSS 168 -> 138 MB, at 2,000 x 20 about 300 -> 235 MB, for
// about 10% more CPU per window report. It follows the live heap as the
// fleet grows, so unlike a fixed GOMEMLIMIT it cannot make a larger
// fleet collect without end. Prometheus makes the same trade (GOGC 75
// by default since 2.53). GOGC in the environment (any value, "off"
// included) is the operator's and is left alone.
const serveGOGC = 50

// tuneGC sets serveGOGC unless getenv("GOGC") (os.Getenv) is set, and returns the
// percentage in effect (-1: off) and whether it came from the
// environment.
func tuneGC(getenv func(string) string) (percent int, fromEnv bool) {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(-1) // read the runtime's, then put it back
		debug.SetGCPercent(p)
		return p, true
	}
	debug.SetGCPercent(serveGOGC)
	return serveGOGC, false
}
