package cbdash

import "time"

// InstanceHistoryQuery selects the per-minute history of every instance
// of one dependency, minutes starting in [From, To) (zero = unbounded).
type InstanceHistoryQuery struct {
	Service, Breaker string
	From, To         time.Time
}

// InstanceMinute is one minute of one instance's breaker: what it counted
// and the worst state it was in (by StateRank; the state at the end of
// each reported period counts).
type InstanceMinute struct {
	Instance string    `json:"instance"`
	Start    time.Time `json:"start"` // the minute's start, UTC
	Calls    int64     `json:"calls"` // admitted calls
	Failures int64     `json:"failures"`
	Slow     int64     `json:"slow"`
	Rejected int64     `json:"rejected"`
	State    string    `json:"state"`
}

// FailureRate is the minute's failure rate in percent of its admitted
// calls (0 without calls).
func (m InstanceMinute) FailureRate() float64 {
	if m.Calls == 0 {
		return 0
	}
	return 100 * float64(m.Failures) / float64(m.Calls)
}

// FleetMinute is one minute of the whole fleet: how many dependencies
// had an instance not closed (open, half-open or forced open) at some
// moment of it, and how many instance breakers were so.
type FleetMinute struct {
	Start        time.Time `json:"start"` // the minute's start, UTC
	Dependencies int       `json:"dependencies"`
	Instances    int       `json:"instances"` // instance breakers, summed over dependencies
}
