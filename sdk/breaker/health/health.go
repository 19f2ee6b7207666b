// Package health reports a service's circuit breakers on its own health or
// readiness endpoint without falling into the load-balancer trap.
//
// # The trap
//
// "Combine circuit breakers with health check endpoints" is common advice,
// and its naive form is a trap: a service whose health check goes red as
// soon as one of its dependencies' breakers opens is taken out of rotation
// by its load balancer (or restarted by its orchestrator), although it
// still answers every request it can, and answers the rest from its
// fallbacks. Every instance of the service sees the same sick dependency,
// so every instance goes red together: one sick dependency of a service
// takes the whole service down, which is the very cascade the breakers
// were there to stop.
//
// So a Handler tells two things apart. A breaker of a non-critical
// dependency (recommendations, a cache, an enrichment) that is open,
// half-open or forced open makes the service degraded: 200, with the
// breakers and since when in the body, for dashboards and people, never
// for the load balancer to act on. Only a breaker marked Critical (a
// dependency without which the instance cannot answer anything useful,
// such as its own database) can fail the check: 503. Mark a dependency
// critical only when taking the instance out of rotation helps, which is
// when another instance may still reach it; a dependency every instance
// shares fails every instance's readiness at once. Never wire breakers
// into a liveness check: restarting a process does not mend its
// dependency.
//
// # Answer
//
// GET or HEAD on the Handler answers application/json (Cache-Control:
// no-store), 200 for "ok" and "degraded", 503 for "unhealthy":
//
//	{"status": "degraded",
//	 "breakers": [
//	   {"name": "recommendations", "state": "open", "critical": false,
//	    "since": "2026-12-04T10:15:02.5Z", "ramp_share": 1},
//	   {"name": "orders-db", "state": "closed", "critical": true,
//	    "since": "2026-12-04T09:00:00Z", "ramp_share": 1}],
//	 "degraded": ["recommendations"],
//	 "failing": []}
//
// state is the breaker's state (closed, open, half_open, forced_open,
// forced_closed); since (RFC 3339, UTC) when it entered that state
// (breaker.Snapshot.Since); ramp_share the share of calls (0..1) a
// closed breaker ramping up after a recovery admits (1 when not
// ramping; breaker.Config.RampDuration). degraded lists the non-critical
// breakers that reject calls (open, half-open, forced open) or ramp;
// failing lists the critical breakers that reject calls (open, half-open,
// forced open): the status is "unhealthy" when failing is not empty,
// "degraded" when degraded is, "ok" otherwise. A critical breaker that
// ramps is degraded, not failing (it admits calls). Breakers are listed
// in the order they were added. Other methods answer 405 with an Allow
// header.
package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// Criticality says whether an open breaker of a dependency can fail the
// service's readiness.
type Criticality bool

const (
	// NonCritical: the service still serves (partly, or from its
	// fallbacks) when this breaker is open; an open breaker reports the
	// service degraded (200). The default to choose.
	NonCritical Criticality = false
	// Critical: the instance cannot serve anything useful without this
	// dependency; an open breaker reports it unhealthy (503), so that a
	// load balancer sends its traffic to other instances.
	Critical Criticality = true
)

// Status is the service's health as a Handler reports it.
type Status string

// Statuses.
const (
	StatusOK        Status = "ok"        // every breaker closed (or forced closed), none ramping
	StatusDegraded  Status = "degraded"  // a non-critical breaker rejects calls, or some breaker ramps: still 200
	StatusUnhealthy Status = "unhealthy" // a critical breaker rejects calls: 503
)

// ErrDuplicate is returned by Add for a breaker, or a breaker name, that
// was added already.
var ErrDuplicate = errors.New("health: breaker already added")

// Handler is an http.Handler reporting the state of the breakers added to
// it (see the package documentation). Make one with New; it is safe for
// concurrent use, and breakers may be added while it serves.
type Handler struct {
	mu       sync.Mutex
	breakers []entry
}

type entry struct {
	b        *breaker.Breaker
	critical Criticality
}

// New returns a Handler with no breakers: it answers "ok" until breakers
// are added.
func New() *Handler { return &Handler{} }

// Add adds b with its criticality. It returns an error wrapping
// ErrDuplicate if b, or another breaker of the same name, was added
// already, and an error for a nil b.
func (h *Handler) Add(b *breaker.Breaker, c Criticality) error {
	if b == nil {
		return errors.New("health: nil breaker")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.breakers {
		if e.b == b || e.b.Name() == b.Name() {
			return fmt.Errorf("%w: %q", ErrDuplicate, b.Name())
		}
	}
	h.breakers = append(h.breakers, entry{b, c})
	return nil
}

// Breaker is one breaker in a Report.
type Breaker struct {
	Name     string    `json:"name"`
	State    string    `json:"state"` // closed, open, half_open, forced_open, forced_closed
	Critical bool      `json:"critical"`
	Since    time.Time `json:"since"`      // when it entered State (UTC)
	Share    float64   `json:"ramp_share"` // share of calls (0..1) admitted while ramping; 1 otherwise
}

// Report is the body a Handler answers.
type Report struct {
	Status   Status    `json:"status"`
	Breakers []Breaker `json:"breakers"`
	Degraded []string  `json:"degraded"` // non-critical breakers rejecting calls, and breakers ramping
	Failing  []string  `json:"failing"`  // critical breakers rejecting calls
}

// rejects reports whether a breaker in state s rejects calls (all of them,
// or all but its probes).
func rejects(s breaker.State) bool {
	return s == breaker.Open || s == breaker.HalfOpen || s == breaker.ForcedOpen
}

// Report returns the breakers' state now. It takes a snapshot of each
// breaker (whose only side effect is to make a due open > half-open change
// or a forced state's expiry visible) and holds no lock while it does.
func (h *Handler) Report() Report {
	h.mu.Lock()
	es := h.breakers[:len(h.breakers):len(h.breakers)]
	h.mu.Unlock()
	r := Report{Status: StatusOK, Breakers: make([]Breaker, 0, len(es)), Degraded: []string{}, Failing: []string{}}
	for _, e := range es {
		s := e.b.Snapshot()
		r.Breakers = append(r.Breakers, Breaker{Name: s.Name, State: s.State.String(), Critical: bool(e.critical),
			Since: s.Since.UTC(), Share: s.RampShare})
		switch {
		case rejects(s.State) && e.critical == Critical:
			r.Failing = append(r.Failing, s.Name)
		case rejects(s.State) || s.RampShare < 1:
			r.Degraded = append(r.Degraded, s.Name)
		}
	}
	switch {
	case len(r.Failing) > 0:
		r.Status = StatusUnhealthy
	case len(r.Degraded) > 0:
		r.Status = StatusDegraded
	}
	return r
}

// ServeHTTP answers GET and HEAD with the Report as JSON: 200 when the
// status is ok or degraded, 503 when it is unhealthy. Other methods get
// 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r := h.Report()
	body, err := json.Marshal(r)
	if err != nil { // cannot happen: every field marshals
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusOK
	if r.Status == StatusUnhealthy {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	if req.Method == http.MethodGet {
		_, _ = w.Write(append(body, '\n'))
	}
}
