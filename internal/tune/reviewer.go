package tune

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cbdash/cbdash"
)

// Transitions is what a review reads of the stored transitions;
// *store.Store implements it.
type Transitions interface {
	Transitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error)
}

// Live is what a review reads of the live state; the collector
// implements it. Dependency returns an error wrapping cbdash.ErrNotFound
// for an unknown key.
type Live interface {
	Dependencies() []cbdash.Dependency
	Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error)
}

// ReviewSpan is how far back a review looks.
const ReviewSpan = 24 * time.Hour

// Reviewer reviews breakers from the live state and the stored history.
type Reviewer struct {
	hist  History
	trans Transitions
	live  Live
	now   func() time.Time
	tuner *Service // nil: no replay figures
}

// WithReplays makes rv back a "no" with the replay's figures for the
// proposed change where it can (the threshold, over the last hour of
// per-second history), run through s.
func (rv *Reviewer) WithReplays(s *Service) *Reviewer {
	rv.tuner = s
	return rv
}

// NewReviewer returns a Reviewer reading hist (minute points), trans and
// live, its time from now.
func NewReviewer(hist History, trans Transitions, live Live, now func() time.Time) *Reviewer {
	return &Reviewer{hist: hist, trans: trans, live: live, now: now}
}

// Review reviews one breaker over the last ReviewSpan. Errors:
// cbdash.ErrNotFound for an unknown dependency; History's and
// Transitions' errors.
func (rv *Reviewer) Review(ctx context.Context, k cbdash.DependencyKey) (BreakerReview, error) {
	d, err := rv.live.Dependency(k)
	if err != nil {
		return BreakerReview{}, err
	}
	return rv.review(ctx, d)
}

// ReviewAll reviews every live dependency, in the collector's order
// (worst first). Errors: as Review's.
func (rv *Reviewer) ReviewAll(ctx context.Context) ([]BreakerReview, error) {
	out := []BreakerReview{}
	for _, d := range rv.live.Dependencies() {
		full, err := rv.live.Dependency(d.DependencyKey) // with its members
		if err != nil {
			continue // gone since the list
		}
		r, err := rv.review(ctx, full)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (rv *Reviewer) review(ctx context.Context, d cbdash.Dependency) (BreakerReview, error) {
	now := rv.now()
	in := ReviewInput{Dependency: d, From: now.Add(-ReviewSpan), To: now, Now: now}
	var err error
	in.Minutes, err = rv.hist.History(ctx, cbdash.HistoryQuery{DependencyKey: d.DependencyKey, From: in.From, To: in.To, Resolution: cbdash.ResolutionMinute})
	if err != nil {
		return BreakerReview{}, err
	}
	in.Transitions, err = rv.trans.Transitions(ctx, cbdash.TransitionQuery{Service: d.Service, Breaker: d.Breaker, From: in.From, To: in.To, Limit: 10000})
	if err != nil {
		return BreakerReview{}, err
	}
	r := Review(in)
	rv.replayThreshold(ctx, &r, now)
	return r, nil
}

// replayThreshold backs a "no" on the threshold with replays over the
// last hour of per-second history: thresholds from the suggested one up
// (thresholdSteps), the lowest without false trips (else the one with
// the fewest) proposed with its figures and the live settings'. Without
// per-second history (or on any failure) the answer stays as it was.
func (rv *Reviewer) replayThreshold(ctx context.Context, r *BreakerReview, now time.Time) {
	i := slices.IndexFunc(r.Answers, func(a Answer) bool { return a.Key == "threshold_above_noise" })
	if rv.tuner == nil || i < 0 || r.Answers[i].Verdict != No {
		return
	}
	rep, err := rv.tuner.Replay(ctx, Request{DependencyKey: r.DependencyKey, From: now.Add(-time.Hour), To: now, Candidates: thresholdSteps(*r)})
	if err != nil || len(rep.Runs) < 2 || rep.Runs[0].Err != "" {
		return
	}
	best := rep.Runs[1]
	for _, c := range rep.Runs[1:] {
		if c.FalseTrips < best.FalseTrips {
			best = c
		}
	}
	live := rep.Runs[0]
	what := "the threshold tried with the fewest false trips"
	if best.FalseTrips == 0 {
		what = "the lowest threshold tried without a false trip"
	}
	r.Answers[i].Change += fmt.Sprintf(" (replayed over the last hour: the live settings trip %d times, %d of them false; %s, %s, trips %d times)",
		live.Trips, live.FalseTrips, what, best.Label, best.Trips)
}

// thresholdSteps are candidate thresholds above r's, lowest first: the
// suggested one, then half as much again, up to 50, 75 and 90 percent.
func thresholdSteps(r BreakerReview) []string {
	var out []string
	for _, v := range []float64{suggested(r), suggested(r) * 1.5, 50, 75, 90} {
		spec := fmt.Sprintf("failure-rate=%.0f", min(v, 100))
		if v > r.Threshold && !slices.Contains(out, spec) {
			out = append(out, spec)
		}
	}
	return out
}
