package breaker

import (
	"sync/atomic"
	"unsafe"
)

// Counter indexes within a stripe.
const (
	cAdmitted = iota
	cSuccesses
	cErrors
	cTimeouts
	cPanics
	cSlow
	cIgnored
	cRejOpen
	cRejHalfOpen
	cRejForced
	cRejBulkhead
	cRejRamp
	cFallbackOK
	cFallbackFailed
	cMisuse
	numCounters
)

// numStripes is how many copies of the counters a breaker keeps. Calls on
// different goroutines mostly update different copies, so that cores do
// not fight over the same cache lines; Snapshot adds the copies up.
const numStripes = 8

// stripe is one copy of the counters, padded to whole cache lines.
type stripe struct {
	n          [numCounters]atomic.Uint64
	latency    [numLatencyBuckets]atomic.Uint64
	latencySum atomic.Int64
	hotAt      atomic.Int64 // breaker time of the stripe's last hot check (see checkHot)
	_          [(64 - (numCounters+numLatencyBuckets+2)*8%64) % 64]byte
}

type counters struct {
	s [numStripes]stripe
}

// stripeHint picks the stripe for the calling goroutine from the address
// of its stack: goroutines' stacks are apart, so concurrent goroutines
// mostly get different stripes, and one goroutine keeps its stripe (until
// its stack moves, which only costs a little sharing). The pointer is only
// turned into a number, never back.
func stripeHint() uint8 {
	var x byte
	a := uintptr(unsafe.Pointer(&x))
	return uint8((a>>11 ^ a>>14 ^ a>>17) % numStripes)
}

func (c *counters) add(s uint8, i int) { c.s[s%numStripes].n[i].Add(1) }

func (c *counters) observe(s uint8, d int64) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	st := &c.s[s%numStripes]
	st.latency[i].Add(1)
	st.latencySum.Add(d)
}

func (c *counters) sum(i int) uint64 {
	var n uint64
	for s := range c.s {
		n += c.s[s].n[i].Load()
	}
	return n
}

func (c *counters) totals() Totals {
	// Outcome counters first, admitted last: a call that ends between the
	// loads is then never missing from Admitted.
	t := Totals{
		Successes: c.sum(cSuccesses), Errors: c.sum(cErrors), Timeouts: c.sum(cTimeouts),
		Panics: c.sum(cPanics), Slow: c.sum(cSlow), Ignored: c.sum(cIgnored),
		RejectedOpen: c.sum(cRejOpen), RejectedHalfOpenFull: c.sum(cRejHalfOpen),
		RejectedForcedOpen: c.sum(cRejForced), RejectedBulkhead: c.sum(cRejBulkhead),
		RejectedRamp:      c.sum(cRejRamp),
		FallbackSuccesses: c.sum(cFallbackOK), FallbackFailures: c.sum(cFallbackFailed),
		Misuse: c.sum(cMisuse),
	}
	t.Failures = t.Errors + t.Timeouts + t.Panics
	t.Admitted = c.sum(cAdmitted)
	return t
}

func (c *counters) latency() ([]uint64, int64) {
	h := make([]uint64, numLatencyBuckets)
	var sum int64
	for s := range c.s {
		for i := range h {
			h[i] += c.s[s].latency[i].Load()
		}
		sum += c.s[s].latencySum.Load()
	}
	return h, sum
}
