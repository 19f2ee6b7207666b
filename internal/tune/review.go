package tune

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Verdicts of a review's answers.
const (
	Yes     = "yes"
	No      = "no"
	Unknown = "unknown" // the history holds no evidence either way
)

// Answer is one question of a review: its verdict, the evidence (and a
// link to it on the dashboard) and, for a "no", what to change.
type Answer struct {
	Key      string `json:"key"` // slow_calls, business_errors, one_per_dependency, fallback, rate_window, visible, threshold_above_noise
	Question string `json:"question"`
	Verdict  string `json:"verdict"` // Yes, No or Unknown
	Evidence string `json:"evidence"`
	Link     string `json:"link"`
	Change   string `json:"change,omitempty"` // what to change, for a "no"
}

// BreakerReview answers "protecting or decorating?" for one breaker from
// its reported settings and its history over [From, To).
type BreakerReview struct {
	cbdash.DependencyKey
	From     time.Time              `json:"from"`
	To       time.Time              `json:"to"`
	Settings protocol.BreakerConfig `json:"settings"`
	Answers  []Answer               `json:"answers"`
	// NormalFailureRate and NoisyFailureRate are the median and the 95th
	// percentile of the per-minute failure rate (percent of the admitted
	// calls) over the everyday minutes (every instance closed, nothing
	// rejected) with at least MinimumCalls recorded calls, EverydayMinutes
	// of them; when there is none (a breaker out of closed somewhere in
	// every minute), over every minute with that many calls, and
	// EverydayMinutes is 0 (API 1.2.0: it was 0 % then). Threshold is the
	// settings'.
	NormalFailureRate float64 `json:"normal_failure_rate"`
	NoisyFailureRate  float64 `json:"noisy_failure_rate"`
	EverydayMinutes   int     `json:"everyday_minutes"`
	// RatedMinutes counts the minutes the two rates are of.
	RatedMinutes int     `json:"rated_minutes"`
	Threshold    float64 `json:"threshold"`
	// FlapsPerDay counts trips within FlapWindow of the same instance's
	// last close, per day of the range.
	FlapsPerDay float64 `json:"flaps_per_day"`
	// FallbackLastServed is the start of the last minute a fallback served
	// (zero: not in the range).
	FallbackLastServed time.Time `json:"fallback_last_served,omitzero"`
}

// ReviewInput is what Review reads: the live dependency (settings,
// instances, labels), its history at minute resolution and its stored
// transitions over [From, To).
type ReviewInput struct {
	Dependency  cbdash.Dependency
	Minutes     []cbdash.Point
	Transitions []cbdash.TransitionRecord
	From, To    time.Time
	Now         time.Time
}

// Review answers the questions of a breaker article (is it protecting,
// or decorating?) for in's dependency. Pure: it reads only in.
func Review(in ReviewInput) BreakerReview {
	d := in.Dependency
	set, _ := LiveFrom(d, nil)
	r := BreakerReview{DependencyKey: d.DependencyKey, From: in.From, To: in.To, Settings: set, Threshold: set.FailureRateThreshold}
	var sum protocol.Counts
	for _, p := range in.Minutes {
		sum.Add(p.Counts)
		if p.Counts.FallbackSuccess > 0 {
			r.FallbackLastServed = p.At
		}
	}
	r.NormalFailureRate, r.NoisyFailureRate, r.RatedMinutes = minuteRates(in.Minutes, max(set.MinimumCalls, 1), true)
	r.EverydayMinutes = r.RatedMinutes
	if r.RatedMinutes == 0 {
		r.NormalFailureRate, r.NoisyFailureRate, r.RatedMinutes = minuteRates(in.Minutes, max(set.MinimumCalls, 1), false)
	}
	r.FlapsPerDay = flapsPerDay(in.Transitions, in.To.Sub(in.From))
	link := "/dependency?" + url.Values{"service": {d.Service}, "breaker": {d.Breaker}, "range": {"24h"}}.Encode()
	r.Answers = []Answer{
		slowCalls(set, sum), businessErrors(set, sum), onePerDependency(d), fallback(sum, r.FallbackLastServed),
		rateWindow(set), visible(d, in.Now), aboveNoise(r),
	}
	for i := range r.Answers {
		r.Answers[i].Link = link
	}
	return r
}

func slowCalls(s protocol.BreakerConfig, c protocol.Counts) Answer {
	a := Answer{Key: "slow_calls", Question: "Does it trip on slow calls?"}
	switch {
	case s.SlowCallDurationMillis > 0:
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("a call slower than %v is slow, and a slow-call rate of %g%% opens it", ms(s.SlowCallDurationMillis), s.SlowCallRateThreshold)
		if s.CallTimeoutMillis > 0 {
			a.Evidence += fmt.Sprintf("; a call over its call timeout %v fails", ms(s.CallTimeoutMillis))
		}
	case s.CallTimeoutMillis > 0:
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("only through its call timeout %v: a call over it fails and counts toward the failure rate; it has no slow-call threshold (no slow-call duration), so calls slower than usual but under %v count as successes",
			ms(s.CallTimeoutMillis), ms(s.CallTimeoutMillis))
	case c.Timeouts > 0 || c.Slow > 0:
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("no timeout in its settings, but %d timeouts and %d slow calls were recorded (the caller's own deadline)", c.Timeouts, c.Slow)
	default:
		a.Verdict, a.Evidence = No, "no call timeout, no slow-call duration, and no timeout recorded"
		a.Change = "set a call timeout a little above the dependency's p99 latency (breaker.Config.CallTimeout, or a context deadline), or a SlowCallDuration: a hung dependency never fails, so the breaker never opens"
	}
	return a
}

func businessErrors(s protocol.BreakerConfig, c protocol.Counts) Answer {
	a := Answer{Key: "business_errors", Question: "Does it ignore business errors?"}
	m := s.Settings.Map()
	switch {
	case c.Ignored > 0:
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("%d calls ended ignored or canceled (not counted against the dependency)", c.Ignored)
	case m["IsSuccessful"] == "custom" || m["IsExcluded"] == "custom":
		a.Verdict, a.Evidence = Yes, "a custom IsSuccessful or IsExcluded in its library's settings"
	default:
		// A business error counted as a success (sdk/breaker's Transport
		// counts an HTTP 4xx as one, as the demo's are) trips nothing, and
		// is not told apart from a success in the reports.
		a.Verdict, a.Evidence = Unknown, "no ignored outcome recorded in the range: its business errors, if any, count as successes (as an HTTP 4xx does through sdk/breaker's Transport: they trip nothing) or as failures; the reports cannot tell which"
		a.Change = "if its business errors count as failures, classify errors that are not the dependency's fault (validation, 4xx, not found) as Ignored: breaker.Ignorable(err) or Config.Classify; otherwise a burst of bad requests opens the breaker on a healthy dependency"
	}
	return a
}

// hostLabels are label keys that name the remote a breaker calls.
var hostLabels = []string{"host", "target", "upstream", "url", "addr", "endpoint"}

// genericNames are breaker names that name no dependency.
var genericNames = []string{"default", "breaker", "cb", "circuit", "http", "client", "grpc", "db", "api"}

func onePerDependency(d cbdash.Dependency) Answer {
	a := Answer{Key: "one_per_dependency", Question: "Is it one breaker per dependency?", Verdict: Yes,
		Evidence: "one name, and its instances' labels name no several hosts"}
	for _, k := range hostLabels {
		if seen := labelValues(d, k); len(seen) > 1 {
			a.Verdict, a.Evidence = No, fmt.Sprintf("label %s has %d values across its instances (%s)", k, len(seen), strings.Join(seen[:min(3, len(seen))], ", "))
		}
	}
	if slices.Contains(genericNames, strings.ToLower(d.Breaker)) {
		a.Verdict, a.Evidence = No, fmt.Sprintf("the name %q names no one dependency", d.Breaker)
	}
	if a.Verdict == No {
		a.Change = "make one breaker per remote (per host or per endpoint group) and name it after it: one sick host behind a shared breaker opens it for all, or hides among the healthy ones"
	}
	return a
}

func labelValues(d cbdash.Dependency, key string) []string {
	var out []string
	for _, ib := range d.PerInstance {
		if v, ok := ib.Labels[key]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func fallback(c protocol.Counts, last time.Time) Answer {
	a := Answer{Key: "fallback", Question: "Does its fallback serve something when it is open?"}
	rej := c.Rejected()
	switch {
	case c.FallbackSuccess > 0 && c.FallbackSuccess >= c.FallbackFailure:
		// A fallback runs for a failed call too: its calls are not a
		// share of the rejections.
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("fallback calls %s, for %d rejections and the failed calls; last served %s",
			wording.FallbackCalls(c.FallbackSuccess, c.FallbackFailure), rej, last.UTC().Format(time.RFC3339))
	case c.FallbackFailure > 0:
		a.Verdict, a.Evidence = No, "fallback calls "+wording.FallbackCalls(c.FallbackSuccess, c.FallbackFailure)+": more failed than served"
		a.Change = "make the fallback serve from something that does not share the dependency's fate (a cache, a default answer, a degraded page): one that fails too only turns a rejection into an error"
	case rej > 0:
		a.Verdict, a.Evidence = No, fmt.Sprintf("%d rejections, no fallback ran: they reached the callers as errors", rej)
		a.Change = "call through ExecuteWithFallback or DoWithFallback with a fallback that serves a cached or default answer"
	default:
		a.Verdict, a.Evidence = Unknown, "no call was rejected in the range: nothing to fall back for"
	}
	return a
}

func rateWindow(s protocol.BreakerConfig) Answer {
	a := Answer{Key: "rate_window", Question: "Does it judge a rate over a window with a minimum number of calls?"}
	m := s.Settings.Map()
	switch {
	case s.Library == "" && s.WindowKind != "":
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("%g%% of %s, at least %d calls", s.FailureRateThreshold, windowText(s), s.MinimumCalls)
	case m["ReadyToTrip"] == "ConsecutiveFailures > 5":
		a.Verdict, a.Evidence = No, s.Library+"'s default ReadyToTrip: more than 5 consecutive failures"
	case m["ReadyToTrip"] == "custom":
		a.Verdict, a.Evidence = Unknown, s.Library+" with a custom ReadyToTrip: read it"
	case s.FailureRateThreshold > 0 && s.MinimumCalls > 0:
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("%s: %g%% with at least %d executions", s.Library, s.FailureRateThreshold, s.MinimumCalls)
	default:
		a.Verdict, a.Evidence = No, s.Library+": a count of failures, not a rate with a minimum of calls"
	}
	if a.Verdict != Yes {
		a.Change = "judge a failure rate over a sliding window with a minimum of calls (sdk/breaker: FailureRateThreshold, Window, MinimumCalls; gobreaker: a ReadyToTrip on Counts.TotalFailures/Counts.Requests with a Requests minimum): a consecutive count opens on 6 failures among thousands of successes at high traffic and never on a 30% failure rate"
	}
	return a
}

func windowText(s protocol.BreakerConfig) string {
	if s.WindowKind == "time" {
		return ms(s.WindowMillis).String()
	}
	return fmt.Sprintf("the last %d calls", s.WindowSize)
}

func visible(d cbdash.Dependency, now time.Time) Answer {
	a := Answer{Key: "visible", Question: "Is it visible (reporting now)?"}
	var last time.Time
	live := 0
	for _, ib := range d.PerInstance {
		if !ib.Stale {
			live++
		}
		if ib.LastSeen.After(last) {
			last = ib.LastSeen
		}
	}
	if live > 0 {
		a.Verdict, a.Evidence = Yes, fmt.Sprintf("%d instances reporting, last heard %v ago", live, now.Sub(last).Round(time.Second))
		return a
	}
	a.Verdict, a.Evidence = No, "no instance is reporting"
	if !last.IsZero() {
		a.Evidence += fmt.Sprintf(" (last heard %v ago)", now.Sub(last).Round(time.Second))
	}
	a.Change = "register the breaker with an sdk/agent (or an adapter) and check the agent reaches the collector: a breaker no one sees opens unnoticed"
	return a
}

func aboveNoise(r BreakerReview) Answer {
	a := Answer{Key: "threshold_above_noise", Question: "Is its threshold above the everyday failure rate?"}
	switch {
	case r.Threshold <= 0:
		a.Verdict, a.Evidence = Unknown, "no failure-rate threshold reported"
	case r.RatedMinutes == 0:
		a.Verdict, a.Evidence = Unknown, "no minute with enough calls in the range: no everyday failure rate to compare the threshold with"
	case r.NoisyFailureRate < r.Threshold:
		a.Verdict = Yes
	default:
		a.Verdict = No
		a.Change = fmt.Sprintf("raise the threshold above the everyday failure rate (to about %.0f%%), or lengthen the window and raise the minimum of calls, so that a noisy minute does not trip it; try it first with cbdash tune %s/%s --candidate failure-rate=%.0f",
			suggested(r), r.Service, r.Breaker, suggested(r))
	}
	if a.Evidence == "" {
		a.Evidence = fmt.Sprintf("failure rate of the admitted calls per %s: median %.1f%%, 95th percentile %.1f%%, threshold %g%%; %.1f flaps a day",
			ratedWhat(r), r.NormalFailureRate, r.NoisyFailureRate, r.Threshold, r.FlapsPerDay)
	}
	return a
}

// ratedWhat says which minutes r's failure rates are of.
func ratedWhat(r BreakerReview) string {
	if r.EverydayMinutes > 0 {
		return fmt.Sprintf("everyday minute (%d, every instance closed and nothing rejected)", r.EverydayMinutes)
	}
	return fmt.Sprintf("minute (%d; none was an everyday one: a breaker was out of closed or rejected calls in each)", r.RatedMinutes)
}

// suggested is a threshold clear of the noise: the noisy rate and half
// again, at most 100.
func suggested(r BreakerReview) float64 { return min(100, r.NoisyFailureRate*1.5+5) }

// minuteRates returns the median and the 95th percentile of the
// per-minute failure rate (percent of the admitted calls) over the
// minutes with at least minCalls recorded calls, only the everyday ones
// (every instance closed, nothing rejected) when everyday is set, and
// how many minutes that is; 0, 0, 0 with none.
func minuteRates(pts []cbdash.Point, minCalls int, everyday bool) (median, p95 float64, n int) {
	var rates []float64
	for _, p := range pts {
		if everyday && (p.Open > 0 || p.Counts.Rejected() > 0) {
			continue // an incident's minute, not an everyday one
		}
		if n := p.Counts.Successes + p.Counts.Failures; n >= int64(minCalls) {
			rates = append(rates, 100*float64(p.Counts.Failures)/float64(n))
		}
	}
	if len(rates) == 0 {
		return 0, 0, 0
	}
	slices.Sort(rates)
	return rates[len(rates)/2], rates[len(rates)*95/100], len(rates)
}

// flapsPerDay counts trips within FlapWindow of the same instance's last
// close, per day of span.
func flapsPerDay(trs []cbdash.TransitionRecord, span time.Duration) float64 {
	sorted := slices.Clone(trs)
	slices.SortFunc(sorted, func(a, b cbdash.TransitionRecord) int { return cmp.Compare(a.At, b.At) })
	closed := map[string]int64{}
	flaps := 0
	for _, t := range sorted {
		switch {
		case t.To == protocol.StateClosed:
			closed[t.Instance] = t.At
		case t.From == protocol.StateClosed && t.To == protocol.StateOpen:
			if c, ok := closed[t.Instance]; ok && t.At-c <= FlapWindow.Milliseconds() {
				flaps++
			}
		}
	}
	if span <= 0 {
		return 0
	}
	return float64(flaps) / span.Hours() * 24
}
