package tune

import (
	"context"
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
	return Review(in), nil
}
