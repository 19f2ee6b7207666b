package source

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
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
	// prev are the counters of the previous scrape; nil when the next
	// scrape is a baseline (the first of the breaker for this reader).
	prev  map[string]float64
	last  time.Time
	state string
	gen   uint64
	// restarted is set when the target's process_start_time_seconds
	// changed: the service restarted, and its counters count from then.
	restarted bool
	// cands are, for an opossum breaker, the states it may be in as far
	// as its counters tell (see opossumCandidates); state is one of them,
	// and it is certain when it is the only one.
	cands []string
	// known, when set for a baseline, is the state cbdash showed of the
	// breaker before it ("" when none; see emitter.knownState).
	known func() string
}

// promReader maps one endpoint's scrapes. It lives as long as its runner
// (one cbdash process): a failed scrape does not make the next one a
// baseline. Counters and states are compared with the last scrape read,
// however long ago: calls counted meanwhile are counted in the window
// that ends at the next scrape, and a change of state meanwhile is a
// transition stamped at it. Only the runner's first scrape, and a
// restart of the service (a counter that went down, or
// process_start_time_seconds that changed), start again.
type promReader struct {
	em       *emitter
	scraped  bool // a scrape was read: breakers that appear later start from 0
	breakers map[string]*promBreaker
	// start is the target's process_start_time_seconds at the last scrape
	// that showed it (0: none yet).
	start float64
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
	pr.processStarted(processStart(fams))
	pr.read(ctx, promSnaps(fams), now, r.t.interval())
	return nil
}

// processStartMetric is the standard Prometheus process metric (seconds
// since the Unix epoch) that prom-client's default metrics, Micrometer's
// UptimeMetrics and the Go and Python clients export.
const processStartMetric = "process_start_time_seconds"

// processStart is the scrape's process_start_time_seconds, or that of a
// family named with a prefix before it (the first by name); 0 when the
// target does not export it.
func processStart(fams map[string]*dto.MetricFamily) float64 {
	names := make([]string, 0, 1)
	for name := range fams {
		if strings.HasSuffix(name, processStartMetric) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return 0
	}
	slices.SortFunc(names, func(a, b string) int {
		// The unprefixed name first, then by name.
		if (a == processStartMetric) != (b == processStartMetric) {
			if a == processStartMetric {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, m := range fams[names[0]].GetMetric() {
		if v := value(m); v > 0 {
			return v
		}
	}
	return 0
}

// processStarted notes the target's process start time (0: not
// exported); when it changed since the last scrape that showed one, the
// service restarted and every breaker counts from its start.
func (pr *promReader) processStarted(start float64) {
	if start <= 0 {
		return
	}
	if pr.start > 0 && start != pr.start {
		for _, b := range pr.breakers {
			b.restarted = true
		}
	}
	pr.start = start
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
				// Appeared since the reader's first scrape: a new
				// breaker (opossum-prometheus writes a breaker's series
				// at its first event), counted from 0 and from closed.
				b.prev, b.state = map[string]float64{}, protocol.StateClosed
				b.cands = []string{protocol.StateClosed}
			}
		}
		if b.prev == nil {
			b.known = func() string { return pr.em.knownState(ctx, name) }
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

// read maps one breaker's scrape. The reader's first scrape of it is its
// baseline (b.prev nil): counters are the starting point (no count), the
// state is the current state, and no transition is made; after it,
// counts and transitions come from what changed since the previous
// scrape read, across failed scrapes. A restart of the service between
// two scrapes (b.restarted, or a counter that went down) is, for
// resilience4j, a new baseline; for opossum, whose state is read from
// events, a breaker that starts again from closed, its counters counted
// from 0.
func (b *promBreaker) read(name string, s *promSnap, now time.Time, interval time.Duration) (protocol.Window, []protocol.Transition) {
	baseline := b.prev == nil
	if !baseline && (b.restarted || counterWentDown(b.prev, s.counter)) {
		if s.lib == LibraryOpossum {
			// The service restarted between two scrapes: its counters
			// count from its start, and its breaker started closed (its
			// events since are followed from there).
			b.prev, b.state, b.cands = map[string]float64{}, protocol.StateClosed, []string{protocol.StateClosed}
		} else {
			// resilience4j's state gauge tells the state: a new baseline.
			b.prev, baseline = nil, true
		}
	}
	b.restarted = false
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
		state, steps = b.opossumState(s, baseline)
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
		if !baseline && b.state != state {
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
	b.prev, b.last, b.state, b.known = s.counter, now, state, nil
	if b.prev == nil {
		b.prev = map[string]float64{}
	}
	return w, ts
}

// counterWentDown reports whether a counter is below its previous value
// (or gone): the service restarted.
func counterWentDown(prev, cur map[string]float64) bool {
	for k, v := range prev {
		if cur[k] < v {
			return true
		}
	}
	return false
}

// opossumState is an opossum breaker's state at this scrape, and the
// states it passed through since the previous one (none on a baseline).
// opossum-prometheus has no state gauge: the state is read from the
// counters of the open, halfOpen and close events (halfOpen only when
// the service had a listener on it when the breaker was added, as
// opossum-prometheus counts only those events).
//
// On a baseline the lifetime counters say which states the breaker may
// be in (opossumCandidates); of them it takes the one cbdash showed
// (b.known), else the first (closed before open before half-open), and
// invents no transition. Between two scrapes it follows the events
// counted since (opossumReplay) from its state; when the events cannot
// have happened from it, from the first candidate they can, else from
// the first state they can (the counters were wrong about it: a breaker
// built open, or counted from mid-way), taken as its state then (no
// transition for that). A scrape with no event settles the state by the
// calls that started since (opossumSettle).
func (b *promBreaker) opossumState(s *promSnap, baseline bool) (string, []string) {
	_, half := s.counter["halfOpen"]
	if baseline {
		b.cands = opossumCandidates(s.counter["open"], s.counter["halfOpen"], s.counter["close"], half)
		if b.known != nil && len(b.cands) > 1 {
			if k := b.known(); slices.Contains(b.cands, k) {
				return k, nil
			}
		}
		return b.cands[0], nil
	}
	if b.state == "" {
		b.state = protocol.StateClosed
	}
	opens, halfs, closes := b.d(s, "open"), b.d(s, "halfOpen"), b.d(s, "close")
	if opens+halfs+closes == 0 {
		return b.opossumSettle(s, half), nil
	}
	starts := []string{b.state}
	for _, st := range append(slices.Clone(b.cands), protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen) {
		if !slices.Contains(starts, st) && (half || st != protocol.StateHalfOpen) {
			starts = append(starts, st)
		}
	}
	for _, from := range starts {
		if state, steps, all := opossumReplay(from, opens, halfs, closes, half); all {
			b.state, b.cands = from, []string{state}
			return state, steps
		}
	}
	state, steps, _ := opossumReplay(b.state, opens, halfs, closes, half)
	b.cands = []string{state}
	return state, steps
}

// opossumSettle is the state of an opossum breaker that counted no open,
// halfOpen or close since the previous scrape, read from the calls that
// started since: fire less reject, cacheHit and coalesceCacheHit (opossum
// 10 counts fire for every call, then answers it from its cache, or
// rejects it when neither closed nor half-open with its trial call still
// to come). Outcomes (success, failure, timeout) do not tell: a call
// admitted while closed may end after the breaker opened, with no event
// (opossum's open() does nothing when already open, and a success closes
// only from half-open). So:
//
//   - calls rejected and others started: half-open (its trial started,
//     the rest rejected), shown open when halfOpen is not counted;
//   - calls rejected, none started: open or half-open (its trial running);
//   - more than one call started, none rejected: closed;
//   - one call started, none rejected: closed, or half-open (its trial);
//   - no call: as it was.
//
// Of the states that fit, it keeps the one shown if it is a candidate,
// else takes the first candidate that fits, else the first that fits,
// even against a state the counters made certain (a breaker built open,
// whose open event came before opossum-prometheus listened, rejects with
// no open counted).
func (b *promBreaker) opossumSettle(s *promSnap, half bool) string {
	halfOpen := protocol.StateHalfOpen
	if !half {
		halfOpen = protocol.StateOpen // half-open is not seen: it shows as open
	}
	rejects := b.d(s, "reject")
	started := b.d(s, "fire") - rejects - b.d(s, "cacheHit") - b.d(s, "coalesceCacheHit")
	var fit []string
	switch {
	case rejects > 0 && started > 0:
		fit = []string{halfOpen}
	case rejects > 0:
		fit = []string{protocol.StateOpen, halfOpen}
	case started > 1:
		fit = []string{protocol.StateClosed}
	case started == 1:
		fit = []string{protocol.StateClosed, halfOpen}
	default:
		return b.state
	}
	cands := slices.DeleteFunc(slices.Clone(b.cands), func(st string) bool { return !slices.Contains(fit, st) })
	if len(cands) == 0 {
		cands = fit[:1]
	}
	b.cands = slices.Compact(cands)
	if slices.Contains(b.cands, b.state) {
		return b.state
	}
	return b.cands[0]
}

// opossumCandidates are the states an opossum breaker may be in after
// open, halfOpen and close events counted over its life (half: halfOpen
// is counted), preferred first. opossum moves closed to open (open),
// open to half-open when its reset timeout passes (halfOpen), half-open
// to closed when the trial call succeeds (close) or back to open (open);
// so, counting from its start (closed):
//
//   - no open: closed;
//   - halfOpen counted: opens = halfOpens + 1 is open; opens = halfOpens
//     is closed when every half-open closed (closes = opens), else closed
//     or half-open (a half-open waits for its trial call: closed first);
//   - halfOpen not counted (half-open then shows as open): opens =
//     closes is closed; no close is open; else closed or open (a
//     half-open that opened again counts an open and no close);
//   - otherwise (counts that began mid-way, a breaker opened or closed
//     by hand: open() and close()): any state.
func opossumCandidates(open, halfOpen, closes float64, half bool) []string {
	o, h, c := toCount(open), toCount(halfOpen), toCount(closes)
	switch {
	case o == 0:
		return []string{protocol.StateClosed}
	case half && o == h+1 && c <= h:
		return []string{protocol.StateOpen}
	case half && o == h && c == o:
		return []string{protocol.StateClosed}
	case half && o == h && c < o:
		return []string{protocol.StateClosed, protocol.StateHalfOpen}
	case !half && c == o:
		return []string{protocol.StateClosed}
	case !half && c == 0:
		return []string{protocol.StateOpen}
	case !half && c < o:
		return []string{protocol.StateClosed, protocol.StateOpen}
	}
	return []string{protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen}
}

// maxReplaySteps bounds the states opossumReplay returns (and the events
// it follows one by one): a breaker that flapped more between two
// scrapes shows its first moves and its end.
const maxReplaySteps = 1000

// opossumReplay follows opossum's state machine from state through the
// open, halfOpen and close events counted between two scrapes (half:
// halfOpen is counted): closed opens; open goes half-open, or closes
// (by hand, or through a half-open that was not counted); half-open
// closes or opens again; without halfOpen counted, an open while open
// is a half-open that opened again (no move seen). It returns the state
// then, every state it passed through, and whether every event was
// followed (false: they cannot all have happened from state).
func opossumReplay(state string, opens, halfs, closes int64, half bool) (string, []string, bool) {
	var steps []string
	for range maxReplaySteps {
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
		case state == protocol.StateOpen && opens > 0 && !half:
			opens--
			continue
		default:
			return state, steps, opens+halfs+closes == 0
		}
		steps = append(steps, state)
	}
	return state, steps, true // more than it follows: taken as followed
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
