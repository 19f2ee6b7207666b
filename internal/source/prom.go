package source

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Libraries of the breakers read from a Prometheus endpoint
// (BreakerConfig.Library).
const (
	LibraryResilience4j = "resilience4j (Prometheus metrics)"
	LibraryOpossum      = "opossum (Prometheus metrics)"
)

// The metric families read. resilience4j's are those its Micrometer
// binder (resilience4j-micrometer, TaggedCircuitBreakerMetrics) registers,
// as Micrometer's Prometheus registry names them: a timer
// "resilience4j.circuitbreaker.calls" becomes the summary (or, with
// percentile histograms on, the histogram) _calls_seconds, tagged name and
// kind (successful, failed, ignored); gauges _state{name,state} (1 for the
// current state), _failure_rate and _slow_call_rate (percent, -1 before
// the minimum number of calls), _buffered_calls and _slow_calls by kind;
// the counter _not_permitted_calls_total. opossum-prometheus registers the
// counter circuit{name,event} (one series per opossum event: fire,
// success, failure, timeout, reject, semaphoreLocked, fallback, open,
// halfOpen, close...) and the summary circuit_perf{name,event} of call
// times in milliseconds (success and failure), both behind an optional
// prefix.
const (
	r4jPrefix       = "resilience4j_circuitbreaker_"
	r4jState        = r4jPrefix + "state"
	r4jCalls        = r4jPrefix + "calls_seconds"
	r4jNotPermitted = r4jPrefix + "not_permitted_calls"
	r4jFailureRate  = r4jPrefix + "failure_rate"
	r4jSlowRate     = r4jPrefix + "slow_call_rate"
	r4jBuffered     = r4jPrefix + "buffered_calls"
	r4jSlowCalls    = r4jPrefix + "slow_calls"
)

// maxScrapeBytes bounds one scrape's body.
const maxScrapeBytes = 16 << 20

// promSnap is one breaker as one scrape shows it.
type promSnap struct {
	lib string
	// Cumulative counters by key: resilience4j "successful", "failed",
	// "ignored" (call counts by kind), "np_counter" (not permitted
	// calls), "sum:successful",
	// "sum:failed" (seconds), "le:<bound>" (histogram buckets over
	// successful and failed calls); opossum its event names and
	// "perf_count", "perf_sum" (ms).
	counter map[string]float64
	// Gauges (resilience4j).
	state                  string
	failureRate, slowRate  float64
	buffered, bufferedFail float64
	slow                   float64
	// quantiles of opossum's circuit_perf (ms), over its lifetime.
	quantiles []quantile
}

func (s *promSnap) add(key string, v float64) {
	if s.counter == nil {
		s.counter = map[string]float64{}
	}
	s.counter[key] += v
}

// promBreaker is what a reader remembers of one breaker.
type promBreaker struct {
	prev  map[string]float64
	last  time.Time
	state string
	gen   uint64
}

// promReader maps one endpoint's scrapes.
type promReader struct {
	em       *emitter
	scraped  bool // a scrape was read: breakers that appear later start from 0
	breakers map[string]*promBreaker
}

func (r *runner) promReader(em *emitter) *promReader {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.prom == nil {
		r.prom = &promReader{em: em, breakers: map[string]*promBreaker{}}
	}
	return r.prom
}

// scrapeLoop scrapes the target every interval until a scrape fails or
// ctx ends; progressed is true when one succeeded.
func (r *runner) scrapeLoop(ctx context.Context, em *emitter) (progressed bool, err error) {
	pr := r.promReader(em)
	for {
		if err := r.scrape(ctx, pr); err != nil {
			return progressed, err
		}
		progressed = true
		if !sleep(ctx, r.src.clk, r.t.interval()) {
			return progressed, ctx.Err()
		}
	}
}

// scrape reads the endpoint once and sends what it shows.
func (r *runner) scrape(ctx context.Context, pr *promReader) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+r.t.interval())
	defer cancel()
	resp, err := r.get(ctx, "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return fmt.Errorf("scrape %s: %w", r.t.URL, err)
	}
	now := r.src.clk.Now()
	r.update(func(s *Status) { s.Connected, s.LastError, s.Reads, s.LastRead = true, "", s.Reads+1, now })
	pr.read(ctx, promSnaps(fams), now, r.t.interval())
	return nil
}

// promSnaps gathers the breakers of a scrape, by name.
func promSnaps(fams map[string]*dto.MetricFamily) map[string]*promSnap {
	snaps := map[string]*promSnap{}
	snap := func(lib, name string) *promSnap {
		s := snaps[name]
		if s == nil {
			s = &promSnap{lib: lib}
			snaps[name] = s
		}
		return s
	}
	for fname, f := range fams {
		base := strings.TrimSuffix(fname, "_total")
		for _, m := range f.GetMetric() {
			l := labels(m)
			name := l["name"]
			if name == "" {
				continue
			}
			switch {
			case base == r4jState:
				if value(m) == 1 {
					snap(LibraryResilience4j, name).state = r4jStateOf(l["state"])
				} else {
					snap(LibraryResilience4j, name)
				}
			case base == r4jCalls:
				readR4jCalls(snap(LibraryResilience4j, name), l["kind"], m)
			case base == r4jCalls+"_count":
				snap(LibraryResilience4j, name).add(l["kind"], value(m))
			case base == r4jCalls+"_sum" && (l["kind"] == "successful" || l["kind"] == "failed"):
				snap(LibraryResilience4j, name).add("sum:"+l["kind"], value(m))
			case base == r4jNotPermitted:
				snap(LibraryResilience4j, name).add("np_counter", value(m))
			case base == r4jFailureRate:
				snap(LibraryResilience4j, name).failureRate = value(m)
			case base == r4jSlowRate:
				snap(LibraryResilience4j, name).slowRate = value(m)
			case base == r4jBuffered:
				s := snap(LibraryResilience4j, name)
				s.buffered += value(m)
				if l["kind"] == "failed" {
					s.bufferedFail += value(m)
				}
			case base == r4jSlowCalls:
				snap(LibraryResilience4j, name).slow += value(m)
			case strings.HasPrefix(fname, "resilience4j_"):
			case strings.HasSuffix(base, "circuit") && l["event"] != "":
				snap(LibraryOpossum, name).add(l["event"], value(m))
			case strings.HasSuffix(base, "circuit_perf") && l["event"] != "":
				readOpossumPerf(snap(LibraryOpossum, name), m)
			}
		}
	}
	return snaps
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// value is a counter's, gauge's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// r4jStateOf maps resilience4j's states: DISABLED (every call permitted,
// none judged) is cbdash's forced closed, METRICS_ONLY (judged, never
// opened) closed.
func r4jStateOf(s string) string {
	switch s {
	case "open":
		return protocol.StateOpen
	case "half_open":
		return protocol.StateHalfOpen
	case "forced_open":
		return protocol.StateForcedOpen
	case "disabled":
		return protocol.StateForcedClosed
	}
	return protocol.StateClosed
}

// readR4jCalls reads one kind of the calls timer, a summary or a
// histogram.
func readR4jCalls(s *promSnap, kind string, m *dto.Metric) {
	var count, sum float64
	switch {
	case m.Summary != nil:
		count, sum = float64(m.Summary.GetSampleCount()), m.Summary.GetSampleSum()
	case m.Histogram != nil:
		count, sum = float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum()
		if kind == "successful" || kind == "failed" {
			for _, b := range m.Histogram.GetBucket() {
				s.add("le:"+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64), float64(b.GetCumulativeCount()))
			}
		}
	default:
		count = value(m)
	}
	s.add(kind, count)
	if kind == "successful" || kind == "failed" {
		s.add("sum:"+kind, sum)
	}
}

// readOpossumPerf reads circuit_perf: call times in ms.
func readOpossumPerf(s *promSnap, m *dto.Metric) {
	sm := m.GetSummary()
	if sm == nil {
		return
	}
	s.add("perf_count", float64(sm.GetSampleCount()))
	s.add("perf_sum", sm.GetSampleSum())
	for _, q := range sm.GetQuantile() {
		if v := q.GetValue(); !math.IsNaN(v) {
			s.quantiles = append(s.quantiles, quantile{q.GetQuantile(), v})
		}
	}
}

// read maps one scrape taken at now, interval after the previous one.
func (pr *promReader) read(ctx context.Context, snaps map[string]*promSnap, now time.Time, interval time.Duration) {
	names := make([]string, 0, len(snaps))
	for n := range snaps {
		names = append(names, n)
	}
	sort.Strings(names)
	var ws []protocol.Window
	var ts []protocol.Transition
	for _, name := range names {
		s := snaps[name]
		b := pr.breakers[name]
		if b == nil {
			b = &promBreaker{}
			pr.breakers[name] = b
			if pr.scraped {
				// Appeared since the first scrape: a new breaker, counted
				// from 0 and from closed.
				b.prev, b.state = map[string]float64{}, protocol.StateClosed
			}
		}
		pr.em.declare(promConfig(name, s.lib, interval))
		w, t := b.read(name, s, now, interval)
		ws = append(ws, w)
		ts = append(ts, t...)
	}
	pr.scraped = true
	pr.em.send(ctx, now, ws, ts)
}

// d is the increase of counter key since the previous scrape (0 on the
// first: what came before is not known to have happened now).
func (b *promBreaker) d(s *promSnap, key string) int64 {
	return delta(b.prev[key], s.counter[key], b.prev != nil)
}

func (b *promBreaker) read(name string, s *promSnap, now time.Time, interval time.Duration) (protocol.Window, []protocol.Transition) {
	var c protocol.Counts
	var sumMs float64
	var hist []int64
	state := s.state
	var steps []string
	if s.lib == LibraryOpossum {
		// opossum counts a timeout, and a call the semaphore refused, as
		// a failure too; here they are timeouts and bulkhead rejections.
		timeouts, locked := b.d(s, "timeout"), b.d(s, "semaphoreLocked")
		c.Successes = b.d(s, "success")
		c.Timeouts = timeouts
		c.Errors = max(b.d(s, "failure")-timeouts-locked, 0)
		c.RejectedBulkhead = locked
		c.FallbackSuccess = b.d(s, "fallback") // opossum counts fallbacks run, not how they ended
		state, steps = opossumState(b, s)
		c.Failures = c.Errors + c.Timeouts
		n := b.d(s, "perf_count")
		if n > 0 {
			sumMs = max(s.counter["perf_sum"]-b.prev["perf_sum"], 0)
			hist = histogram(n, s.quantiles, sumMs/float64(n))
		}
		rejects := b.d(s, "reject")
		if state == protocol.StateHalfOpen {
			c.RejectedHalfOpen = rejects
		} else {
			c.RejectedOpen = rejects
		}
	} else {
		if state == "" {
			state = protocol.StateClosed
		}
		c.Successes, c.Errors, c.Ignored = b.d(s, "successful"), b.d(s, "failed"), b.d(s, "ignored")
		c.Failures = c.Errors
		// Refused calls: the not_permitted_calls counter, or, in versions
		// that count them in the calls timer, its not-permitted kind.
		rejected := b.d(s, "np_counter")
		if _, ok := s.counter["np_counter"]; !ok {
			rejected = b.d(s, "not_permitted") + b.d(s, "unpermitted")
		}
		switch state {
		case protocol.StateHalfOpen:
			c.RejectedHalfOpen = rejected
		case protocol.StateForcedOpen:
			c.RejectedForced = rejected
		default:
			c.RejectedOpen = rejected
		}
		n := c.Successes + c.Failures
		if n > 0 {
			sumMs = 1000 * max(s.counter["sum:successful"]+s.counter["sum:failed"]-b.prev["sum:successful"]-b.prev["sum:failed"], 0)
			hist = histogram(n, r4jBucketQuantiles(b, s, n), sumMs/float64(n))
		}
		if b.state != "" && b.state != state {
			steps = []string{state}
		}
	}
	c.Admitted = c.Successes + c.Failures + c.Ignored
	start, ms := windowSpan(b.last, now, interval)
	w := protocol.Window{Breaker: name, Start: start, Millis: ms, State: state, Counts: c, Latency: hist, LatencySumMs: sumMs}
	if hist == nil {
		w.LatencySumMs = 0
	}
	if s.lib == LibraryResilience4j {
		w.Headroom = protocol.Headroom{Calls: toCount(s.buffered), Failures: toCount(s.bufferedFail), Slow: toCount(s.slow),
			FailureRate: clampPct(s.failureRate), SlowCallRate: clampPct(s.slowRate)}
	}
	var ts []protocol.Transition
	from := b.state
	for _, to := range steps {
		if from == "" || from == to {
			from = to
			continue
		}
		b.gen++
		cause := protocol.Cause{Kind: protocol.CauseSampled, Reason: "seen in " + s.lib + ": " + to + " at this scrape, " + from + " before"}
		if from == protocol.StateClosed && to == protocol.StateOpen {
			cause.Kind = protocol.CauseLibraryRule
			if s.lib == LibraryResilience4j && s.failureRate >= 0 {
				cause.FailureRate = clampPct(s.failureRate)
				cause.WindowCalls, cause.WindowFailed = toCount(s.buffered), toCount(s.bufferedFail)
			}
		}
		ts = append(ts, protocol.Transition{Breaker: name, From: from, To: to, At: now.UnixMilli(), Generation: b.gen, Cause: cause})
		from = to
	}
	b.prev, b.last, b.state = s.counter, now, state
	if b.prev == nil {
		b.prev = map[string]float64{}
	}
	return w, ts
}

// opossumState follows opossum's state machine through the open,
// halfOpen and close events counted since the previous scrape (all of
// them on the first), starting from the state then (closed on the
// first): closed opens; open goes half-open (or closes, when halfOpen is
// not counted: opossum-prometheus counts only events that had a listener
// when the breaker was added); half-open closes or opens again. It
// returns the state now and every state it passed through.
func opossumState(b *promBreaker, s *promSnap) (string, []string) {
	opens, halfs, closes := b.d(s, "open"), b.d(s, "halfOpen"), b.d(s, "close")
	if b.prev == nil { // first scrape: the whole history
		opens, halfs, closes = toCount(s.counter["open"]), toCount(s.counter["halfOpen"]), toCount(s.counter["close"])
	}
	state := b.state
	if state == "" {
		state = protocol.StateClosed
	}
	var steps []string
	for range 1000 {
		switch {
		case state == protocol.StateClosed && opens > 0:
			opens--
			state = protocol.StateOpen
		case state == protocol.StateOpen && halfs > 0:
			halfs--
			state = protocol.StateHalfOpen
		case state == protocol.StateOpen && closes > 0:
			closes--
			state = protocol.StateClosed
		case state == protocol.StateHalfOpen && closes > 0:
			closes--
			state = protocol.StateClosed
		case state == protocol.StateHalfOpen && opens > 0:
			opens--
			state = protocol.StateOpen
		default:
			return state, steps
		}
		steps = append(steps, state)
	}
	return state, steps
}

// r4jBucketQuantiles reads the calls histogram's buckets, when
// resilience4j exports them (percentile histograms on), as quantiles of
// the calls since the previous scrape; nil without buckets.
func r4jBucketQuantiles(b *promBreaker, s *promSnap, n int64) []quantile {
	var les []float64
	for k := range s.counter {
		if v, ok := strings.CutPrefix(k, "le:"); ok {
			if le, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(le, 0) {
				les = append(les, le)
			}
		}
	}
	if len(les) == 0 {
		return nil
	}
	sort.Float64s(les)
	qs := []quantile{{0, 0}}
	for _, le := range les {
		key := "le:" + strconv.FormatFloat(le, 'g', -1, 64)
		below := float64(delta(b.prev[key], s.counter[key], true))
		qs = append(qs, quantile{min(below/float64(n), 1), le * 1000})
	}
	return qs
}

// promConfig is what cbdash knows of a scraped breaker's configuration:
// its library, and how it is read.
func promConfig(name, lib string, interval time.Duration) protocol.BreakerConfig {
	metrics := "resilience4j_circuitbreaker_*"
	if lib == LibraryOpossum {
		metrics = "circuit, circuit_perf (opossum-prometheus)"
	}
	return protocol.BreakerConfig{
		Name: name, Library: lib, HoldsUnsupported: true, Sampled: true,
		Settings: protocol.NewSettings(map[string]string{"metrics": metrics, "scrape_interval": interval.String()}),
	}
}
