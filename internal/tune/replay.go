package tune

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ErrBudget is returned when a replay runs past its time budget.
var ErrBudget = errors.New("tune: replay ran past its time budget")

// Transition is one replayed state change.
type Transition struct {
	At       time.Time `json:"at"`
	From     string    `json:"from"` // protocol.State*
	To       string    `json:"to"`
	Cause    string    `json:"cause"` // protocol.Cause*
	Estimate bool      `json:"estimated,omitempty"`
}

// Run is the outcome of one replay: one settings over one range.
type Run struct {
	Label    string                 `json:"label"` // "live" or the candidate as given
	Settings protocol.BreakerConfig `json:"settings"`
	// Trips counts closed > open transitions.
	Trips int `json:"trips"`
	// OpenSeconds is the time spent out of closed (open and half-open).
	OpenSeconds float64 `json:"open_seconds"`
	// Rejected counts calls the replayed breaker rejected.
	Rejected int64 `json:"rejected"`
	// IntoFailing counts calls into a failing dependency: failures and
	// timeouts the replayed breaker admitted.
	IntoFailing int64 `json:"into_failing"`
	// DetectSeconds is, averaged over the trips inside an episode, the
	// seconds from the episode's first second (the failure rate rising)
	// to the trip; -1 when no trip was inside one.
	DetectSeconds float64 `json:"detect_seconds"`
	// Flaps counts trips within FlapWindow of the breaker's last close.
	Flaps int `json:"flaps"`
	// FalseTrips counts trips outside every failing episode.
	FalseTrips  int          `json:"false_trips"`
	Transitions []Transition `json:"transitions"`
	// Err is why the settings could not be replayed ("" if they were).
	Err string `json:"error,omitempty"`
	// Pareto is set by Sweep on the runs that no other run beats on both
	// IntoFailing and FalseTrips.
	Pareto bool `json:"pareto,omitempty"`
	// Shadow is, for the run of a shadow configuration the breaker
	// reported (sdk/breaker Config.Shadows), its name; "" otherwise.
	Shadow string `json:"shadow,omitempty"`
	// RecordedTrips is, for a shadow's run, how many would-be trips
	// (closed > open) its instances recorded in the range, summed over
	// the instances (the replay is of one typical instance); absent
	// when not known.
	RecordedTrips *int `json:"recorded_trips,omitempty"`
}

// FlapWindow is how soon after a close a new trip counts as a flap.
const FlapWindow = 5 * time.Minute

// engine replays seconds through one real breaker on a virtual clock.
type engine struct {
	b       *breaker.Breaker
	clk     *breakertest.Clock
	slowDur time.Duration
	ends    []pendingEnd // slow calls in flight, in end order
	run     *Run
	est     bool // the current second is estimated
}

type pendingEnd struct {
	call breaker.Call
	at   time.Time
	o    breaker.Outcome
}

// Replay runs seconds (from Typical) through a real sdk/breaker made of
// settings on a breakertest.Clock, starting closed at the first second,
// and returns the run's figures (episodes from Episodes of the same
// seconds). Each second's calls are spread evenly over it, failures and
// slow calls interleaved evenly among them (the order within a second is
// lost in per-second totals: a count window's trip may differ by the
// calls of one second). A slow call ends SlowCallDuration after it
// starts, others at once. Errors: ErrNotReplayable, an invalid config
// (breaker.ErrInvalidConfig), ErrBudget when deadline passes, ctx's.
func Replay(ctx context.Context, seconds []Second, eps []Episode, settings protocol.BreakerConfig, deadline time.Time) (Run, error) {
	run := Run{Settings: settings, DetectSeconds: -1, Transitions: []Transition{}}
	if len(seconds) == 0 {
		return run, nil
	}
	e, err := newEngine(seconds[0].At, settings, &run)
	if err != nil {
		return run, err
	}
	for i, s := range seconds {
		if i%4096 == 0 {
			if err := checkTime(ctx, deadline); err != nil {
				return run, err
			}
		}
		e.second(s)
	}
	e.finish(seconds[len(seconds)-1].At.Add(time.Second))
	score(&run, eps, seconds[len(seconds)-1].At.Add(time.Second))
	return run, nil
}

func checkTime(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !deadline.IsZero() && time.Now().After(deadline) {
		return ErrBudget
	}
	return nil
}

func newEngine(start time.Time, settings protocol.BreakerConfig, run *Run) (*engine, error) {
	clk := breakertest.NewClock(start)
	cfg, err := BreakerConfig(settings, clk)
	if err != nil {
		return nil, err
	}
	b, err := breaker.New("replay", cfg)
	if err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	e := &engine{b: b, clk: clk, slowDur: b.Config().SlowCallDuration, run: run}
	b.Subscribe(e.observe)
	return e, nil
}

func (e *engine) observe(t breaker.Transition) {
	e.run.Transitions = append(e.run.Transitions, Transition{
		At: t.At, From: t.From.String(), To: t.To.String(), Cause: string(t.Cause.Kind), Estimate: e.est,
	})
}

// second replays one second's calls.
func (e *engine) second(s Second) {
	n := s.Calls()
	e.est = s.Estimated > 0
	if n == 0 {
		return
	}
	fails := s.Failures + s.Timeouts
	step := time.Second / time.Duration(n)
	for i := range n {
		at := s.At.Add(step*time.Duration(i) + step/2)
		o := breaker.Success
		if spread(i, fails, n) {
			o = breaker.Failure
			if spread(i, s.Timeouts, fails) {
				o = breaker.Timeout
			}
		}
		e.call(at, o, e.slowDur > 0 && spread((i+n/2)%n, s.Slow, n))
	}
}

// spread reports whether the i-th of n slots is one of k spread evenly.
func spread(i, k, n int64) bool {
	return k > 0 && (i+1)*k/n > i*k/n
}

// call makes one call at at with outcome o, slow or not.
func (e *engine) call(at time.Time, o breaker.Outcome, slow bool) {
	e.endUntil(at)
	e.clk.Set(at)
	c, err := e.b.Allow()
	if err != nil {
		e.run.Rejected++
		return
	}
	if o != breaker.Success {
		e.run.IntoFailing++
	}
	if slow {
		e.ends = append(e.ends, pendingEnd{call: c, at: at.Add(e.slowDur), o: o})
		return
	}
	c.Report(o)
}

// endUntil ends the slow calls due by t, in order.
func (e *engine) endUntil(t time.Time) {
	k := 0
	for ; k < len(e.ends) && !e.ends[k].at.After(t); k++ {
		e.clk.Set(e.ends[k].at)
		e.ends[k].call.Report(e.ends[k].o)
	}
	e.ends = e.ends[:copy(e.ends, e.ends[k:])]
}

// finish ends what is in flight and lets lazy transitions due by end show.
func (e *engine) finish(end time.Time) {
	e.endUntil(end)
	e.clk.Set(end)
	e.b.State()
}
