package tune

import (
	"context"
	"fmt"
	"strings"
)

// MaxGrid caps the candidates one sweep may replay.
const MaxGrid = 200

// Grid expands a sweep's grid into candidate specs: grid is
// ParseCandidate's form with values separated by "|", for example
// "failure-rate=30|50|70,minimum-calls=10|20,window=50|100,open=10s|30s"
// (3x2x2x2 = 24 candidates), in the order of the keys given, the last
// varying fastest. Errors wrap ErrBadCandidate: a part that is not
// KEY=V1|V2, or more than MaxGrid candidates.
func Grid(grid string) ([]string, error) {
	specs := []string{""}
	for _, part := range strings.Split(grid, ",") {
		k, vs, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" || vs == "" {
			return nil, fmt.Errorf("%w: %q is not KEY=V1|V2", ErrBadCandidate, part)
		}
		var next []string
		for _, s := range specs {
			for _, v := range strings.Split(vs, "|") {
				next = append(next, strings.TrimPrefix(s+","+k+"="+v, ","))
			}
		}
		if len(next) > MaxGrid {
			return nil, fmt.Errorf("%w: the grid has more than %d candidates", ErrBadCandidate, MaxGrid)
		}
		specs = next
	}
	return specs, nil
}

// MarkPareto sets Pareto on the runs (Err empty) that no other run beats
// on both calls into a failing dependency and false trips: none has at
// most as many of each and fewer of one.
func MarkPareto(runs []Run) {
	for i := range runs {
		runs[i].Pareto = runs[i].Err == ""
		for j := range runs {
			if i != j && runs[i].Pareto && runs[j].Err == "" && dominates(runs[j], runs[i]) {
				runs[i].Pareto = false
			}
		}
	}
}

func dominates(a, b Run) bool {
	return a.IntoFailing <= b.IntoFailing && a.FalseTrips <= b.FalseTrips &&
		(a.IntoFailing < b.IntoFailing || a.FalseTrips < b.FalseTrips)
}

// Sweep replays r with the candidates of grid (see Grid) added to
// r.Candidates and marks the Pareto front (MarkPareto). progress, when
// not nil, is called after each run with how many are done of how many.
// Errors: Grid's and Replay's.
func (s *Service) Sweep(ctx context.Context, r Request, grid string, progress func(done, total int)) (Report, error) {
	specs, err := Grid(grid)
	if err != nil {
		return Report{}, err
	}
	r.Candidates = append(r.Candidates, specs...)
	r.progress = progress
	rep, err := s.Replay(ctx, r)
	if err == nil {
		MarkPareto(rep.Runs)
	}
	return rep, err
}
