package tune_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// member is one live instance of a dependency reporting settings.
func member(set protocol.BreakerConfig, labels map[string]string) *cbdash.InstanceBreaker {
	return &cbdash.InstanceBreaker{Service: "shop", Instance: "shop-1", Breaker: set.Name, Config: &set, Labels: labels, LastSeen: t0.Add(-time.Second)}
}

// minutes is a day of minute points: calls a minute, failing percent of
// them, and rejected/fallback counts spread over the first hour.
func minutes(calls int64, failing float64, rejected, fbOK, fbFail int64) []cbdash.Point {
	var pts []cbdash.Point
	for i := range 1440 {
		c := protocol.Counts{Admitted: calls, Failures: int64(float64(calls) * failing / 100)}
		c.Successes = calls - c.Failures
		if i < 60 {
			c.RejectedOpen, c.FallbackSuccess, c.FallbackFailure = rejected, fbOK, fbFail
		}
		pts = append(pts, cbdash.Point{At: t0.Add(time.Duration(i-1440) * time.Minute), Width: time.Minute, Counts: c})
	}
	return pts
}

func review(set protocol.BreakerConfig, pts []cbdash.Point) map[string]tune.Answer {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: set.Name}, PerInstance: []*cbdash.InstanceBreaker{member(set, nil)}}
	r := tune.Review(tune.ReviewInput{Dependency: d, Minutes: pts, From: t0.Add(-24 * time.Hour), To: t0, Now: t0})
	out := map[string]tune.Answer{}
	for _, a := range r.Answers {
		out[a.Key] = a
	}
	return out
}

// good is a breaker that passes every question.
var good = protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 20,
	OpenDurationMillis: 10_000, CallTimeoutMillis: 2000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}

func TestReviewOfABreakerThatProtects(t *testing.T) {
	pts := minutes(600, 1, 100, 100, 0)
	pts[10].Counts.Ignored = 5
	for k, a := range review(good, pts) {
		if a.Verdict != tune.Yes || a.Change != "" || a.Evidence == "" || a.Link == "" {
			t.Errorf("%s: %+v, want yes with evidence", k, a)
		}
	}
}

func TestReviewSaysNoToEachFailingBreakerAndWhatToChange(t *testing.T) {
	noTimeout := good
	noTimeout.CallTimeoutMillis = 0
	// As sdk/adapter/gobreaker describes a gobreaker with default settings.
	gob := protocol.BreakerConfig{Name: "search", Library: "sony/gobreaker v2", OpenDurationMillis: 60_000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1,
		Settings: protocol.NewSettings(map[string]string{"MaxRequests": "1", "Interval": "0s", "BucketPeriod": "0s", "Timeout": "1m0s",
			"ReadyToTrip": "ConsecutiveFailures > 5", "IsSuccessful": "err == nil", "IsExcluded": "none"})}
	lowThreshold := good
	lowThreshold.FailureRateThreshold = 5
	for _, c := range []struct {
		name, key string
		set       protocol.BreakerConfig
		pts       []cbdash.Point
	}{
		{"no timeout", "slow_calls", noTimeout, minutes(600, 1, 0, 0, 0)},
		{"a consecutive-count gobreaker", "rate_window", gob, minutes(600, 1, 0, 0, 0)},
		{"a fallback that always fails", "fallback", good, minutes(600, 1, 100, 0, 100)},
		{"no fallback at all", "fallback", good, minutes(600, 1, 100, 0, 0)},
		{"a threshold under its normal failure rate", "threshold_above_noise", lowThreshold, minutes(600, 6, 0, 0, 0)},
	} {
		a := review(c.set, c.pts)[c.key]
		if a.Verdict != tune.No || a.Change == "" {
			t.Errorf("%s: %s is %+v, want no with a change", c.name, c.key, a)
		}
	}
}

func TestReviewOfASharedNameAndOfASilentBreaker(t *testing.T) {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: "payments"}, PerInstance: []*cbdash.InstanceBreaker{
		member(good, map[string]string{"host": "pay-a"}), member(good, map[string]string{"host": "pay-b"})}}
	d.PerInstance[0].Stale, d.PerInstance[1].Stale = true, true
	r := tune.Review(tune.ReviewInput{Dependency: d, From: t0.Add(-24 * time.Hour), To: t0, Now: t0})
	for _, a := range r.Answers {
		if (a.Key == "one_per_dependency" || a.Key == "visible") && (a.Verdict != tune.No || a.Change == "") {
			t.Errorf("%s: %+v, want no", a.Key, a)
		}
	}
}

// liveDeps is a Live of fixed dependencies.
type liveDeps []cbdash.Dependency

func (l liveDeps) Dependencies() []cbdash.Dependency { return l }
func (l liveDeps) Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error) {
	for _, d := range l {
		if d.DependencyKey == k {
			return d, nil
		}
	}
	return cbdash.Dependency{}, cbdash.ErrNotFound
}
func (l liveDeps) Transitions(context.Context, cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error) {
	ms := t0.UnixMilli()
	tr := func(inst, from, to string, at int64) cbdash.TransitionRecord {
		return cbdash.TransitionRecord{Instance: inst, Transition: protocol.Transition{From: from, To: to, At: at}}
	}
	return []cbdash.TransitionRecord{ // a1 closes and trips again 2 minutes later: one flap
		tr("a1", "closed", "open", ms-600_000), tr("a1", "half_open", "closed", ms-500_000), tr("a1", "closed", "open", ms-380_000),
		tr("a2", "closed", "open", ms-600_000),
	}, nil
}

func TestReviewerReadsHistoryAndTransitions(t *testing.T) {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: "payments"}, PerInstance: []*cbdash.InstanceBreaker{member(good, nil)}}
	l := liveDeps{d}
	h := &gatedHistory{points: minutes(600, 1, 10, 10, 0), entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(h.release)
	rs, err := tune.NewReviewer(h, l, l, func() time.Time { return t0 }).ReviewAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].FlapsPerDay != 1 || rs[0].FallbackLastServed.IsZero() || rs[0].NormalFailureRate != 1 {
		t.Errorf("reviews %+v", rs)
	}
	if _, err := tune.NewReviewer(h, l, l, func() time.Time { return t0 }).Review(context.Background(), cbdash.DependencyKey{Service: "x", Breaker: "y"}); err == nil {
		t.Error("an unknown dependency was reviewed")
	}
}

// byResolution answers minute points for minute queries, seconds else.
type byResolution struct{ minutes, seconds []cbdash.Point }

func (b byResolution) History(_ context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error) {
	if q.Resolution == cbdash.ResolutionMinute {
		return b.minutes, nil
	}
	return b.seconds, nil
}

func TestReviewBacksANoOnTheThresholdWithTheReplay(t *testing.T) {
	low := good
	low.FailureRateThreshold, low.WindowSize, low.MinimumCalls = 5, 20, 5
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: "payments"}, PerInstance: []*cbdash.InstanceBreaker{member(low, nil)}}
	l := liveDeps{d}
	h := byResolution{minutes: minutes(600, 6, 0, 0, 0), seconds: noisy(0.06)[:900]}
	settings := func(cbdash.DependencyKey) (protocol.BreakerConfig, error) { return low, nil }
	rv := tune.NewReviewer(h, l, l, func() time.Time { return t0 }).WithReplays(tune.NewService(h, settings, 1, time.Minute))
	r, err := rv.Review(context.Background(), d.DependencyKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Answers {
		if a.Key == "threshold_above_noise" && (a.Verdict != tune.No || !strings.Contains(a.Change, "replayed over the last hour: the live settings trip ") || !strings.Contains(a.Change, "without a false trip, failure-rate=")) {
			t.Errorf("%+v", a)
		}
		if a.Key == "threshold_above_noise" {
			t.Log(a.Change)
		}
	}
}

// TestReviewWordsFallbacksAsEverywhere is finding 7 of the demo trial:
// the review said "fallbacks served 8662, failed 3204, of 11696
// rejections", more fallbacks than rejections (a fallback runs for a
// failed call too) and "served" beside a total. It says "fallback calls
// N (S served, F failed)", the words of the incident and drill reports,
// and that they ran for the rejections and the failed calls.
func TestReviewWordsFallbacksAsEverywhere(t *testing.T) {
	a := review(good, minutes(600, 1, 100, 80, 30))["fallback"]
	want := "fallback calls 6600 (4800 served, 1800 failed), for 6000 rejections and the failed calls; last served "
	if a.Verdict != tune.Yes || !strings.HasPrefix(a.Evidence, want) {
		t.Errorf("fallback answer %+v, want yes with evidence %q...", a, want)
	}
}

// TestReviewOfABreakerNeverAllClosedForAMinute is finding 8 of the demo
// trial: on a fleet where some instance was out of closed in every
// minute, no minute was an everyday one, and the review said "failure
// rate per minute: median 0.0%, 95th percentile 0.0%" beside a history
// of about 1 % a minute. With no everyday minute it rates every minute
// (the history's 1 %) and says so.
func TestReviewOfABreakerNeverAllClosedForAMinute(t *testing.T) {
	pts := minutes(600, 1, 0, 0, 0)
	for i := range pts {
		pts[i].Open = 1 // one instance opened in every minute
	}
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: good.Name}, PerInstance: []*cbdash.InstanceBreaker{member(good, nil)}}
	r := tune.Review(tune.ReviewInput{Dependency: d, Minutes: pts, From: t0.Add(-24 * time.Hour), To: t0, Now: t0})
	if r.NormalFailureRate != 1 || r.EverydayMinutes != 0 || r.RatedMinutes != 1440 {
		t.Errorf("normal %.1f%% over %d minutes (%d everyday), want 1%% over 1440, none everyday", r.NormalFailureRate, r.RatedMinutes, r.EverydayMinutes)
	}
	for _, a := range r.Answers {
		if a.Key == "threshold_above_noise" && (a.Verdict != tune.Yes || !strings.Contains(a.Evidence, "median 1.0%") || !strings.Contains(a.Evidence, "none was an everyday one")) {
			t.Errorf("threshold answer %+v, want yes at a median of 1.0%% of every minute, saying none was an everyday one", a)
		}
	}
}

// TestReviewSaysWhatItCanTellOfSlowCallsAndBusinessErrors is finding 14
// of the demo trial: the review said "Does it trip on slow calls? yes --
// call timeout 1s, slow-call duration 0s" of a breaker the status shows
// without a slow-call threshold, and "Does it ignore business errors?
// no" of every demo breaker, whose business errors (HTTP 4xx through
// sdk/breaker's Transport) count as successes and trip nothing. The
// first is right through the timeout alone, and now says so; the second
// cannot be told from the reports: unknown, saying why.
func TestReviewSaysWhatItCanTellOfSlowCallsAndBusinessErrors(t *testing.T) {
	a := review(good, minutes(600, 1, 0, 0, 0))
	if s := a["slow_calls"]; s.Verdict != tune.Yes || !strings.HasPrefix(s.Evidence, "only through its call timeout 2s: a call over it fails") ||
		!strings.Contains(s.Evidence, "it has no slow-call threshold") {
		t.Errorf("slow calls: %+v, want yes through the timeout only, saying there is no slow-call threshold", s)
	}
	slow := good
	slow.SlowCallDurationMillis, slow.SlowCallRateThreshold = 500, 80
	if s := review(slow, minutes(600, 1, 0, 0, 0))["slow_calls"]; s.Verdict != tune.Yes || !strings.HasPrefix(s.Evidence, "a call slower than 500ms is slow, and a slow-call rate of 80% opens it") {
		t.Errorf("slow calls with a threshold: %+v", s)
	}
	if b := a["business_errors"]; b.Verdict != tune.Unknown || !strings.Contains(b.Evidence, "count as successes (as an HTTP 4xx does through sdk/breaker's Transport") {
		t.Errorf("business errors: %+v, want unknown, saying a 4xx through the Transport counts as a success", b)
	}
}
