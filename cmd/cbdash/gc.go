package main

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
)

// serveGOGC is the garbage collector's target percentage `cbdash serve`
// runs with when GOGC is not in its environment: the runtime collects
// once the heap has grown by half of what is live, instead of by all of
// it (Go's default, 100).
//
// The collector's heap is mostly long-lived (every breaker's live state
// and last window, each connection's session) and it allocates one
// decoded window and one line per window report, so with 100 the process
// holds about three times its live heap. Measured with cbdash loadgen
// (issue 15's eighth round: `git show 6b3f366:docs/benchmarks.md`; docs/scaling.md, Memory): at 1,000 agents x 20
// breakers RSS 168 -> 138 MB, at 2,000 x 20 about 300 -> 235 MB, for
// about 10% more CPU per window report. It follows the live heap as the
// fleet grows, so unlike a fixed GOMEMLIMIT it cannot make a larger
// fleet collect without end. Prometheus makes the same trade (GOGC 75
// by default since 2.53). GOGC in the environment (any value, "off"
// included) is the operator's and is left alone.
const serveGOGC = 50

// tuneGC sets serveGOGC unless GOGC is in the environment (lookup is
// os.LookupEnv; an empty GOGC counts, the runtime reads it as 100), and
// returns the percentage in effect (-1: off) and whether it came from the
// environment.
func tuneGC(lookup func(string) (string, bool)) (percent int, fromEnv bool) {
	if _, ok := lookup("GOGC"); ok {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return 0, true
		}
		v := s[0].Value.Uint64()
		if v > math.MaxInt32 { // off
			return -1, true
		}
		return int(v), true
	}
	debug.SetGCPercent(serveGOGC)
	return serveGOGC, false
}
