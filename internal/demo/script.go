package demo

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidScript is wrapped by every error of Script.Validate.
var ErrInvalidScript = errors.New("invalid fault script")

// Fault is how a dependency server answers while it applies it. The zero
// Fault is a healthy server that answers 200 at once.
type Fault struct {
	// Latency is added before every answer (0 = none).
	Latency time.Duration
	// ErrorRate is the share (0..1) of requests answered with ErrorStatus.
	ErrorRate float64
	// ErrorStatus is the status of those answers (0 = 500). It should be a
	// 5xx: sdk/breaker's RoundTripper counts 5xx as failures.
	ErrorStatus int
	// BusinessRate is the share (0..1) of requests answered 404 or 400
	// (alternately): business errors, which must trip nothing.
	BusinessRate float64
	// Unavailable answers every request 503 with a Retry-After header.
	Unavailable bool
	// Down resets every connection: the client sees a connection error,
	// as with a crashed process behind a load balancer.
	Down bool
}

// Phase is one row of a fault script.
type Phase struct {
	Name     string
	Duration time.Duration // > 0
	Fault    Fault
	// RampTo, when set, makes the numeric fields (latency and rates) move
	// linearly from Fault at the start of the phase to RampTo at its end;
	// the flags (Unavailable, Down) and ErrorStatus stay those of Fault.
	RampTo *Fault
}

// Script is a table of phases that loops forever. Its zero value is
// invalid (no phases); DefaultScript is the demo's.
type Script struct {
	Phases []Phase
}

// Validate reports the first bad row, naming it, wrapped in ErrInvalidScript.
func (s Script) Validate() error {
	if len(s.Phases) == 0 {
		return fmt.Errorf("%w: no phases", ErrInvalidScript)
	}
	for i, p := range s.Phases {
		if p.Duration <= 0 {
			return fmt.Errorf("%w: phases[%d] (%s).Duration must be > 0", ErrInvalidScript, i, p.Name)
		}
		for _, f := range []*Fault{&p.Fault, p.RampTo} {
			if f == nil {
				continue
			}
			if err := f.validate(); err != nil {
				return fmt.Errorf("%w: phases[%d] (%s): %v", ErrInvalidScript, i, p.Name, err)
			}
		}
	}
	return nil
}

func (f Fault) validate() error {
	switch {
	case f.Latency < 0:
		return errors.New("negative Latency")
	case f.ErrorRate < 0 || f.ErrorRate > 1:
		return fmt.Errorf("ErrorRate %v is outside 0..1", f.ErrorRate)
	case f.BusinessRate < 0 || f.BusinessRate > 1:
		return fmt.Errorf("BusinessRate %v is outside 0..1", f.BusinessRate)
	case f.ErrorRate+f.BusinessRate > 1:
		return errors.New("ErrorRate + BusinessRate is above 1")
	case f.ErrorStatus != 0 && (f.ErrorStatus < 500 || f.ErrorStatus > 599):
		return fmt.Errorf("ErrorStatus %d is not a 5xx", f.ErrorStatus)
	}
	return nil
}

// Period is the length of one loop of the script.
func (s Script) Period() time.Duration {
	var d time.Duration
	for _, p := range s.Phases {
		d += p.Duration
	}
	return d
}

// At returns the phase in force elapsed after the script started (looping;
// a negative elapsed counts back from the end) and the fault it applies
// then, ramps interpolated. The script must be valid.
func (s Script) At(elapsed time.Duration) (index int, phase Phase, fault Fault) {
	period := s.Period()
	t := elapsed % period
	if t < 0 {
		t += period
	}
	for i, p := range s.Phases {
		if t < p.Duration {
			return i, p, p.faultAt(float64(t) / float64(p.Duration))
		}
		t -= p.Duration
	}
	// Unreachable for a valid script: t < period.
	last := len(s.Phases) - 1
	return last, s.Phases[last], s.Phases[last].Fault
}

// faultAt interpolates the phase's fault at progress x in [0, 1).
func (p Phase) faultAt(x float64) Fault {
	f := p.Fault
	if p.RampTo == nil {
		return f
	}
	to := *p.RampTo
	lerp := func(a, b float64) float64 { return a + (b-a)*x }
	f.Latency = time.Duration(lerp(float64(f.Latency), float64(to.Latency)))
	f.ErrorRate = lerp(f.ErrorRate, to.ErrorRate)
	f.BusinessRate = lerp(f.BusinessRate, to.BusinessRate)
	return f
}

// Scaled returns a copy of the script with every duration (phase lengths
// and latencies) multiplied by k, for tests that want the same story
// faster.
func (s Script) Scaled(k float64) Script {
	out := Script{Phases: make([]Phase, len(s.Phases))}
	for i, p := range s.Phases {
		p.Duration = time.Duration(float64(p.Duration) * k)
		p.Fault.Latency = time.Duration(float64(p.Fault.Latency) * k)
		if p.RampTo != nil {
			to := *p.RampTo
			to.Latency = time.Duration(float64(to.Latency) * k)
			p.RampTo = &to
		}
		out.Phases[i] = p
	}
	return out
}

// DefaultScript is the demo's one-minute story. With the fleet's breakers
// (count window of 20 calls, minimum 10, failure and slow-call thresholds
// 50 %, slow above 250 ms, open 5 s growing 1.5x per failed probe) it
// gives, for one dependency: a failure-rate trip in the error burst,
// failed probes during the outage, probes that succeed in the slow
// recovery, business errors that trip nothing, and a slow-call trip at the
// end of the creeping latency. Then 30 s of calm, so that the breakers
// stay closed long enough for the incidents they made to end.
func DefaultScript() Script {
	ms := time.Millisecond
	s := time.Second
	return Script{Phases: []Phase{
		{Name: "healthy", Duration: 6 * s, Fault: Fault{Latency: 10 * ms}},
		{Name: "error burst", Duration: 6 * s, Fault: Fault{Latency: 10 * ms, ErrorRate: 0.7, ErrorStatus: 500}},
		{Name: "outage", Duration: 5 * s, Fault: Fault{Down: true}},
		{Name: "outage (503)", Duration: 3 * s, Fault: Fault{Unavailable: true}},
		{Name: "slow recovery", Duration: 10 * s,
			Fault:  Fault{Latency: 150 * ms, ErrorRate: 0.4, ErrorStatus: 502},
			RampTo: &Fault{Latency: 20 * ms}},
		{Name: "healthy", Duration: 6 * s, Fault: Fault{Latency: 10 * ms}},
		{Name: "business errors", Duration: 8 * s, Fault: Fault{Latency: 10 * ms, BusinessRate: 0.5}},
		{Name: "creeping latency", Duration: 12 * s,
			Fault:  Fault{Latency: 20 * ms},
			RampTo: &Fault{Latency: 600 * ms}},
		{Name: "recovered", Duration: 4 * s, Fault: Fault{Latency: 15 * ms}},
		{Name: "calm", Duration: 30 * s, Fault: Fault{Latency: 10 * ms}},
	}}
}

// ClimbingScript is the demo's slow-building trouble: after 10 s of health
// the share of failed calls climbs from none to 80% over 40 s, so a closed
// breaker's failure rate is seen rising through its headroom bar (it
// reaches the 50% threshold about 25 s into the climb) before the breaker
// opens; failed probes follow while the failures stay high, then the
// dependency recovers, the probes succeed and the breaker closes; 30 s of
// calm end the loop (100 s).
func ClimbingScript() Script {
	ms := time.Millisecond
	s := time.Second
	return Script{Phases: []Phase{
		{Name: "healthy", Duration: 10 * s, Fault: Fault{Latency: 10 * ms}},
		{Name: "failures climbing", Duration: 40 * s,
			Fault:  Fault{Latency: 10 * ms, ErrorStatus: 500},
			RampTo: &Fault{Latency: 10 * ms, ErrorRate: 0.8, ErrorStatus: 500}},
		{Name: "failing", Duration: 5 * s, Fault: Fault{Latency: 10 * ms, ErrorRate: 0.8, ErrorStatus: 500}},
		{Name: "recovered", Duration: 15 * s, Fault: Fault{Latency: 10 * ms}},
		{Name: "calm", Duration: 30 * s, Fault: Fault{Latency: 10 * ms}},
	}}
}
