package tune

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// History is what a replay reads of the stored history: a dependency's
// per-second points (cbdash.Point, Width 1 s, with Reports).
// *store.Store implements it.
type History interface {
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
}

// LiveSettings returns the settings a dependency's breakers reported in
// their hellos (the first live instance's); an error wrapping
// cbdash.ErrNotFound for an unknown dependency.
type LiveSettings func(k cbdash.DependencyKey) (protocol.BreakerConfig, error)

// Errors of Service.Replay besides those of Replay and History.
var (
	// ErrBusy: every replay slot was taken for longer than the caller
	// would wait (its context ended first).
	ErrBusy = errors.New("tune: every replay slot is busy")
	// ErrRange: the range is empty, longer than MaxRange, or holds no
	// per-second history.
	ErrRange = errors.New("tune: bad range")
)

// MaxRange is the longest range a replay reads (the store's per-second
// history reads at most 100,000 points).
const MaxRange = 24 * time.Hour

// Service runs replays off the ingest path: at most Slots at a time,
// each within Budget.
type Service struct {
	hist   History
	live   LiveSettings
	slots  chan struct{}
	budget time.Duration
}

// NewService returns a Service reading hist and live, running up to
// slots replays at once (<= 0: 1), each ended with ErrBudget after
// budget (<= 0: 30 s).
func NewService(hist History, live LiveSettings, slots int, budget time.Duration) *Service {
	if budget <= 0 {
		budget = 30 * time.Second
	}
	return &Service{hist: hist, live: live, slots: make(chan struct{}, max(slots, 1)), budget: budget}
}

// Request asks for a replay of one dependency over [From, To) with the
// live settings and each candidate (ParseCandidate specs).
type Request struct {
	cbdash.DependencyKey
	From, To   time.Time
	Candidates []string
	progress   func(done, total int) // Sweep's
}

// Report is a replay's answer: one Run per settings, live first.
type Report struct {
	cbdash.DependencyKey
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Seconds is how many seconds of history were replayed; Instances
	// the mean instance count they were divided by.
	Seconds   int     `json:"seconds"`
	Instances float64 `json:"instances"`
	// NormalRate is the dependency's normal failure rate (percent; see
	// NormalRate).
	NormalRate float64   `json:"normal_failure_rate"`
	Episodes   []Episode `json:"episodes"`
	// Estimated are the spans whose calls the live breakers rejected,
	// filled with estimated outcomes (see Typical).
	Estimated []Episode `json:"estimated"`
	Runs      []Run     `json:"runs"`
	// Notes say what is approximate.
	Notes []string `json:"notes"`
}

// Approximation notes, stated with every report.
const (
	NoteOrder     = "replayed from per-second totals: the order of calls within a second is lost, so a trip may move within its second (measured on a recorded instance: 25 ms with failures spread through each second, 275 ms with each second's failures first)"
	NoteEstimated = "while the live breakers were open their rejected calls were never seen: those calls are filled with the half-open probes' failure rate (else the last seen) and the spans marked estimated"
	NoteSlow      = "slow calls are those slower than the live slow-call duration; each is replayed as taking the candidate's slow-call duration"
)

// Replay runs r (see Request) and returns its report; one candidate that
// does not parse or cannot run fails the request, the live settings that
// cannot run (an adapter's) give a Run with Err set. Errors: ErrBadCandidate,
// ErrRange, ErrBusy, ErrBudget, History's errors, cbdash.ErrNotFound.
func (s *Service) Replay(ctx context.Context, r Request) (Report, error) {
	rep := Report{DependencyKey: r.DependencyKey, From: r.From, To: r.To}
	if !r.To.After(r.From) || r.To.Sub(r.From) > MaxRange {
		return rep, fmt.Errorf("%w: from must be before to, at most %v apart", ErrRange, MaxRange)
	}
	live, err := s.live(r.DependencyKey)
	if err != nil {
		return rep, err
	}
	sets, err := candidates(live, r.Candidates)
	if err != nil {
		return rep, err
	}
	if err := s.acquire(ctx); err != nil {
		return rep, err
	}
	defer func() { <-s.slots }()
	ctx, cancel := context.WithTimeout(ctx, s.budget)
	defer cancel()
	return s.run(ctx, rep, sets, r.progress)
}

// acquire takes a replay slot, waiting while ctx lasts.
func (s *Service) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
	}
}

// Labeled is settings to replay under a label.
type Labeled struct {
	Label    string
	Settings protocol.BreakerConfig
	// Shadow is, for the settings of a shadow configuration the breaker
	// reported (protocol.BreakerConfig.Shadows), its name.
	Shadow string
}

// ShadowLabel is the label of the run of the shadow configuration name.
func ShadowLabel(name string) string { return "shadow: " + name }

// candidates are the runs of a replay: the live settings, each shadow
// configuration the live breaker reported (labelled ShadowLabel), then
// each candidate spec.
func candidates(live protocol.BreakerConfig, specs []string) ([]Labeled, error) {
	out := []Labeled{{Label: "live", Settings: live}}
	for _, sh := range live.Shadows.List() {
		out = append(out, Labeled{Label: ShadowLabel(sh.Name), Settings: sh, Shadow: sh.Name})
	}
	for _, spec := range specs {
		c, err := ParseCandidate(live, spec)
		if err != nil {
			return nil, err
		}
		c.Shadows = protocol.Shadows{} // a candidate is one configuration
		out = append(out, Labeled{Label: spec, Settings: c})
	}
	return out, nil
}

func (s *Service) run(ctx context.Context, rep Report, sets []Labeled, progress func(done, total int)) (Report, error) {
	points, err := s.hist.History(ctx, cbdash.HistoryQuery{DependencyKey: rep.DependencyKey, From: rep.From, To: rep.To, Resolution: cbdash.ResolutionSecond})
	if err != nil {
		return rep, err
	}
	if len(points) == 0 {
		return rep, fmt.Errorf("%w: no per-second history of %s in the range (seconds are kept for a limited time)", ErrRange, rep.DependencyKey)
	}
	rep.Runs, err = runAll(ctx, points, sets, &rep, progress)
	return rep, err
}

// RunAll replays points (per-second, as History returns them) under each
// settings, in order, and fills rep's figures of the traffic itself;
// settings that cannot run (ErrNotReplayable) give a Run with Err set.
// Errors: Replay's.
func RunAll(ctx context.Context, points []cbdash.Point, sets []Labeled, rep *Report) ([]Run, error) {
	return runAll(ctx, points, sets, rep, nil)
}

func runAll(ctx context.Context, points []cbdash.Point, sets []Labeled, rep *Report, progress func(done, total int)) ([]Run, error) {
	seconds := Typical(points)
	eps := Episodes(seconds)
	rep.Seconds, rep.Instances, rep.NormalRate = len(seconds), meanReports(points), NormalRate(seconds)
	rep.Episodes, rep.Estimated = eps, EstimatedSpans(seconds)
	rep.Notes = []string{NoteOrder, NoteEstimated, NoteSlow}
	deadline, _ := ctx.Deadline()
	runs := make([]Run, 0, len(sets))
	for _, l := range sets {
		run, err := Replay(ctx, seconds, eps, l.Settings, deadline)
		run.Label, run.Shadow = l.Label, l.Shadow
		if errors.Is(err, ErrNotReplayable) {
			run.Err = err.Error()
		} else if err != nil {
			return nil, err
		}
		runs = append(runs, run)
		if progress != nil {
			progress(len(runs), len(sets))
		}
	}
	return runs, nil
}

func meanReports(points []cbdash.Point) float64 {
	var n int64
	for _, p := range points {
		n += max(p.Reports, 1)
	}
	return float64(n) / float64(len(points))
}

// EstimatedSpans merges the seconds with estimated calls into spans.
func EstimatedSpans(seconds []Second) []Episode {
	var out []Episode
	for _, s := range seconds {
		if s.Estimated == 0 {
			continue
		}
		if n := len(out); n > 0 && !s.At.After(out[n-1].To) {
			out[n-1].To = s.At.Add(time.Second)
			continue
		}
		out = append(out, Episode{From: s.At, To: s.At.Add(time.Second)})
	}
	return out
}

// LiveFrom returns the settings of d's first live (not stale) instance
// that reported some, else of its first instance with any; it passes err
// on (a Collector's Dependency(k) call goes straight in). Errors: err,
// cbdash.ErrNotFound when no instance reported settings.
func LiveFrom(d cbdash.Dependency, err error) (protocol.BreakerConfig, error) {
	if err != nil {
		return protocol.BreakerConfig{}, err
	}
	var found *protocol.BreakerConfig
	for _, ib := range d.PerInstance {
		if ib.Config == nil || (ib.Config.WindowKind == "" && ib.Config.Library == "") {
			continue
		}
		if !ib.Stale {
			return *ib.Config, nil
		}
		if found == nil {
			found = ib.Config
		}
	}
	if found == nil {
		return protocol.BreakerConfig{}, fmt.Errorf("%w: no instance of %s reported its settings", cbdash.ErrNotFound, d.DependencyKey)
	}
	return *found, nil
}
