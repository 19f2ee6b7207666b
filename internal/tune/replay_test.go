package tune_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
)

var t0 = clocktest.Noon() // the test clock's noon

// liveSettings is a typical sdk/breaker hello: 50% of the last 100 calls,
// at least 10, open 10 s.
var liveSettings = protocol.BreakerConfig{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50,
	SlowCallRateThreshold: 100, MinimumCalls: 10, OpenDurationMillis: 10_000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}

// climbing is n instances' traffic: calls per instance and second, 2%
// failing for quiet seconds, then a failure rate climbing by step points
// a second up to 100%, which it holds for hold seconds, then 2% again
// for after seconds. Rejections are not recorded (no live breaker).
func climbing(n, calls, quiet int, step float64, hold, after int) []cbdash.Point {
	var pts []cbdash.Point
	rate := func(i int) float64 {
		switch {
		case i < quiet:
			return 0.02
		case i < quiet+int(100/step)+hold:
			return min(1, 0.02+step/100*float64(i-quiet+1))
		}
		return 0.02
	}
	total := quiet + int(100/step) + hold + after
	for i := range total {
		c := int64(calls * n)
		f := int64(float64(c) * rate(i))
		pts = append(pts, cbdash.Point{At: t0.Add(time.Duration(i) * time.Second), Width: time.Second, Reports: int64(n),
			Counts: protocol.Counts{Admitted: c, Successes: c - f, Failures: f, Errors: f}})
	}
	return pts
}

func replayAll(t testing.TB, pts []cbdash.Point, specs ...string) (tune.Report, []tune.Run) {
	t.Helper()
	sets := []tune.Labeled{{Label: "live", Settings: liveSettings}}
	for _, s := range specs {
		c, err := tune.ParseCandidate(liveSettings, s)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, tune.Labeled{Label: s, Settings: c})
	}
	var rep tune.Report
	runs, err := tune.RunAll(context.Background(), pts, sets, &rep)
	if err != nil {
		t.Fatal(err)
	}
	return rep, runs
}

func firstTrip(r tune.Run) time.Time {
	for _, tr := range r.Transitions {
		if tr.From == protocol.StateClosed && tr.To == protocol.StateOpen {
			return tr.At
		}
	}
	return time.Time{}
}

func TestReplayLowerThresholdTripsEarlier(t *testing.T) {
	rep, runs := replayAll(t, climbing(4, 50, 120, 5, 60, 120), "failure-rate=20")
	live, cand := runs[0], runs[1]
	if live.Trips == 0 || cand.Trips == 0 {
		t.Fatalf("trips: live %d, candidate %d; want both > 0", live.Trips, cand.Trips)
	}
	if !firstTrip(cand).Before(firstTrip(live)) {
		t.Errorf("candidate's first trip %v not before live's %v", firstTrip(cand), firstTrip(live))
	}
	if cand.IntoFailing >= live.IntoFailing {
		t.Errorf("calls into a failing dependency: candidate %d, live %d; want fewer", cand.IntoFailing, live.IntoFailing)
	}
	if cand.DetectSeconds < 0 || cand.DetectSeconds >= live.DetectSeconds {
		t.Errorf("detection: candidate %.1fs, live %.1fs", cand.DetectSeconds, live.DetectSeconds)
	}
	if len(rep.Episodes) != 1 || rep.Instances != 4 || rep.Seconds != len(climbing(4, 50, 120, 5, 60, 120)) {
		t.Errorf("report: %d episodes, %.1f instances, %d seconds", len(rep.Episodes), rep.Instances, rep.Seconds)
	}
	if live.FalseTrips != 0 || cand.FalseTrips != 0 || live.Rejected == 0 || live.OpenSeconds <= 0 {
		t.Errorf("live %+v\ncandidate %+v", live, cand)
	}
}

// noisy is an hour of one instance's 10 calls a second, each failing
// with probability p (a fixed seed).
func noisy(p float64) []cbdash.Point {
	r := rand.New(rand.NewPCG(1, 2))
	var pts []cbdash.Point
	for i := range 3600 {
		var f int64
		for range 10 {
			if r.Float64() < p {
				f++
			}
		}
		pts = append(pts, cbdash.Point{At: t0.Add(time.Duration(i) * time.Second), Width: time.Second, Reports: 1,
			Counts: protocol.Counts{Admitted: 10, Successes: 10 - f, Failures: f, Errors: f}})
	}
	return pts
}

func TestReplayThresholdInsideNoiseTripsFalsely(t *testing.T) {
	// 5% normal failures: windows of 20 calls see 20% now and then; a
	// 20% threshold trips outside any episode.
	_, runs := replayAll(t, noisy(0.05), "failure-rate=20,window=20,minimum-calls=5")
	if runs[0].Trips != 0 {
		t.Errorf("live settings tripped %d times on noise", runs[0].Trips)
	}
	if c := runs[1]; c.FalseTrips == 0 || c.FalseTrips != c.Trips || c.Flaps == 0 {
		t.Errorf("noise candidate: %d trips, %d false, %d flaps; want every trip false, some flaps", c.Trips, c.FalseTrips, c.Flaps)
	}
}

func TestTypicalFillsRejectedCallsAndMarksThemEstimated(t *testing.T) {
	pts := []cbdash.Point{
		{At: t0, Reports: 2, Counts: protocol.Counts{Admitted: 20, Successes: 10, Failures: 10, Errors: 10}},
		{At: t0.Add(time.Second), Reports: 2, Counts: protocol.Counts{RejectedOpen: 40}},
		{At: t0.Add(2 * time.Second), Reports: 2, Counts: protocol.Counts{Admitted: 2, Failures: 2, Timeouts: 2, RejectedOpen: 38}},
	}
	s := tune.Typical(pts)
	if s[0].Successes != 5 || s[0].Failures != 5 || s[0].Estimated != 0 {
		t.Errorf("second 0: %+v", s[0])
	}
	// No probe in second 1: the last rate seen (50%) fills its 20 calls.
	if s[1].Estimated != 20 || s[1].Failures != 10 || s[1].Successes != 10 {
		t.Errorf("second 1: %+v", s[1])
	}
	// The probes of second 2 all timed out: its 19 rejected calls fail.
	if s[2].Estimated != 19 || s[2].Timeouts != 1 || s[2].Failures != 19 || s[2].Successes != 0 {
		t.Errorf("second 2: %+v", s[2])
	}
	if sp := tune.EstimatedSpans(s); len(sp) != 1 || !sp[0].From.Equal(t0.Add(time.Second)) || !sp[0].To.Equal(t0.Add(3*time.Second)) {
		t.Errorf("estimated spans %+v", sp)
	}
}

func TestParseCandidate(t *testing.T) {
	c, err := tune.ParseCandidate(liveSettings, "failure-rate=40,minimum-calls=20,window=30s,open=5s")
	if err != nil {
		t.Fatal(err)
	}
	if c.FailureRateThreshold != 40 || c.MinimumCalls != 20 || c.WindowKind != "time" || c.WindowMillis != 30_000 || c.WindowBuckets != 10 || c.OpenDurationMillis != 5000 {
		t.Errorf("candidate %+v", c)
	}
	for _, bad := range []string{"failure-rate=0", "threshold=40", "window=x", "minimum-calls=-1", "open=-1s", "failure-rate"} {
		if _, err := tune.ParseCandidate(liveSettings, bad); !errors.Is(err, tune.ErrBadCandidate) {
			t.Errorf("%q: err %v, want ErrBadCandidate", bad, err)
		}
	}
}

func TestAdapterSettingsAreNotReplayedButCandidatesAre(t *testing.T) {
	gob := protocol.BreakerConfig{Name: "db", Library: "sony/gobreaker v2"}
	var rep tune.Report
	c, err := tune.ParseCandidate(gob, "failure-rate=50,window=100")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := tune.RunAll(context.Background(), climbing(1, 50, 60, 10, 30, 0), []tune.Labeled{{Label: "live", Settings: gob}, {Label: "c", Settings: c}}, &rep)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Err == "" || runs[1].Err != "" || runs[1].Trips == 0 {
		t.Errorf("runs %+v", runs)
	}
}
