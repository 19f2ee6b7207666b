package breaker_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// validEdges are the transitions the state machine may make.
var validEdges = map[[2]breaker.State]bool{
	{breaker.Closed, breaker.Open}:         true,
	{breaker.Open, breaker.HalfOpen}:       true,
	{breaker.HalfOpen, breaker.Open}:       true,
	{breaker.HalfOpen, breaker.Closed}:     true,
	{breaker.Closed, breaker.ForcedOpen}:   true,
	{breaker.Closed, breaker.ForcedClosed}: true,
}

func init() {
	// Commands may force or release from any state.
	for s := breaker.Closed; s <= breaker.ForcedClosed; s++ {
		if s != breaker.ForcedOpen {
			validEdges[[2]breaker.State{s, breaker.ForcedOpen}] = true
		}
		if s != breaker.ForcedClosed {
			validEdges[[2]breaker.State{s, breaker.ForcedClosed}] = true
		}
		if s != breaker.Closed {
			validEdges[[2]breaker.State{s, breaker.Closed}] = true
		}
	}
}

// chain records transitions and checks that they form one unbroken chain:
// each starts where the one before ended, on an allowed edge, with a
// higher generation, so that no state change is reported twice or lost.
type chain struct {
	mu    sync.Mutex
	last  breaker.State
	gen   uint64
	n     int
	opens int
	err   error
}

func (c *chain) observe(t breaker.Transition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	switch {
	case t.From != c.last:
		c.err = fmt.Errorf("transition %d %v>%v starts from %v", c.n+1, t.From, t.To, c.last)
	case !validEdges[[2]breaker.State{t.From, t.To}]:
		c.err = fmt.Errorf("transition %d %v>%v is not an allowed edge", c.n+1, t.From, t.To)
	case t.Generation <= c.gen:
		c.err = fmt.Errorf("transition %d to generation %d after generation %d", c.n+1, t.Generation, c.gen)
	}
	c.last, c.gen = t.To, t.Generation
	c.n++
	if t.To == breaker.Open {
		c.opens++
	}
}

func (c *chain) check() (last breaker.State, n, opens int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.n, c.opens, c.err
}

// rejectionFor is the rejection a breaker in state s gives (nil: it
// admits, bulkhead aside).
func rejectionFor(s breaker.State) error {
	switch s {
	case breaker.Open:
		return breaker.ErrOpen
	case breaker.ForcedOpen:
		return breaker.ErrForcedOpen
	}
	return nil
}

// checkRejection says whether err is a rejection a breaker seen in state s
// (with probes half-open slots full or not) may give.
func checkRejection(s breaker.State, err error, bulkhead bool) error {
	if bulkhead && errors.Is(err, breaker.ErrBulkheadFull) && s != breaker.Open && s != breaker.ForcedOpen {
		return nil
	}
	want := rejectionFor(s)
	if s == breaker.HalfOpen {
		want = breaker.ErrHalfOpenFull
	}
	if want == nil || !errors.Is(err, want) {
		return fmt.Errorf("rejected with %v while %v", err, s)
	}
	return nil
}

// checkTotals checks that totals add up: every admitted call ended in one
// outcome or is still in flight.
func checkTotals(s breaker.Snapshot) error {
	t := s.Totals
	if t.Failures != t.Errors+t.Timeouts+t.Panics {
		return fmt.Errorf("failures %d != errors+timeouts+panics %d", t.Failures, t.Errors+t.Timeouts+t.Panics)
	}
	ended := t.Successes + t.Failures + t.Ignored
	if ended > t.Admitted || int64(t.Admitted-ended) != s.InFlight {
		return fmt.Errorf("admitted %d, ended %d, in flight %d", t.Admitted, ended, s.InFlight)
	}
	var hist uint64
	for _, n := range s.Latency {
		hist += n
	}
	if hist != ended {
		return fmt.Errorf("latency histogram counts %d calls, %d ended", hist, ended)
	}
	if t.Slow > t.Successes+t.Failures {
		return fmt.Errorf("slow %d > successes+failures", t.Slow)
	}
	w := s.Window
	if w.Calls < 0 || w.Failures < 0 || w.Slow < 0 || w.Failures > w.Calls || w.Slow > w.Calls {
		return fmt.Errorf("window %+v out of range", w)
	}
	if w.FailureRate < 0 || w.FailureRate > 100 || w.SlowCallRate < 0 || w.SlowCallRate > 100 {
		return fmt.Errorf("window rates %+v out of range", w)
	}
	return nil
}
