package tune_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/tune"
)

func TestGridExpandsEveryCombination(t *testing.T) {
	specs, err := tune.Grid("failure-rate=30|50|70,minimum-calls=10|20,window=50|100,open=10s|30s")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 24 || specs[0] != "failure-rate=30,minimum-calls=10,window=50,open=10s" || specs[23] != "failure-rate=70,minimum-calls=20,window=100,open=30s" {
		t.Errorf("%d specs: %q ... %q", len(specs), specs[0], specs[len(specs)-1])
	}
	for _, bad := range []string{"failure-rate", "=1|2", "failure-rate=1|2,window=" + strings.Repeat("1|", 150) + "1"} {
		if _, err := tune.Grid(bad); !errors.Is(err, tune.ErrBadCandidate) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestMarkParetoKeepsOnlyTheUnbeaten(t *testing.T) {
	runs := []tune.Run{
		{Label: "a", IntoFailing: 100, FalseTrips: 0},
		{Label: "b", IntoFailing: 50, FalseTrips: 2},
		{Label: "c", IntoFailing: 100, FalseTrips: 1}, // beaten by a
		{Label: "d", IntoFailing: 60, FalseTrips: 2},  // beaten by b
		{Label: "e", IntoFailing: 10, FalseTrips: 9},
		{Label: "f", Err: "not replayable"},
	}
	tune.MarkPareto(runs)
	var front []string
	for _, r := range runs {
		if r.Pareto {
			front = append(front, r.Label)
		}
	}
	if !slices.Equal(front, []string{"a", "b", "e"}) {
		t.Errorf("front %v, want [a b e]", front)
	}
}

func TestSweepOnNoiseAndAnOutage(t *testing.T) {
	// An hour of 5% noise, then a climbing outage: tight settings cut the
	// calls into the outage but trip on noise; loose ones the reverse.
	pts := append(noisy(0.05), climbing(1, 10, 0, 5, 120, 60)...)
	for i := 3600; i < len(pts); i++ {
		pts[i].At = t0.Add(time.Duration(i) * time.Second)
	}
	h := &gatedHistory{points: pts, entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(h.release)
	var calls []int
	rep, err := tune.NewService(h, live, 1, time.Minute).Sweep(context.Background(),
		tune.Request{DependencyKey: dep, From: t0, To: t0.Add(2 * time.Hour)},
		"failure-rate=15|50|90,window=20|100", func(done, total int) { calls = append(calls, done*100+total) })
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 7 || len(calls) != 7 || calls[6] != 707 {
		t.Fatalf("%d runs, progress %v", len(rep.Runs), calls)
	}
	var front []tune.Run
	for _, r := range rep.Runs {
		if r.Pareto {
			front = append(front, r)
		}
	}
	if len(front) < 2 {
		t.Fatalf("front %+v", front)
	}
	tight := rep.Runs[1] // failure-rate=15,window=20
	if tight.FalseTrips == 0 {
		t.Errorf("the tightest candidate made no false trip: %+v", tight)
	}
}
