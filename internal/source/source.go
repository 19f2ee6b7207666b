// Package source pulls breaker data from services that do not run a cbdash
// agent and feeds it to the collector's ingest pipeline: Hystrix event
// streams (hystrix.go: hystrix-go, Netflix Hystrix, resilience4j's and
// opossum's Hystrix streams, Turbine, Envoy's Hystrix sink) and Prometheus
// metrics endpoints (prom.go: resilience4j's Micrometer metrics and
// opossum-prometheus). Each Target is one instance of one service: every
// read becomes a protocol.Hello (its breakers, as the library configures
// them) and a protocol.Batch (window deltas and the transitions seen),
// handed to a Sink (the collector's Ingest), so a source's instances are
// validated, stored, shown and made stale as an agent's are.
//
// The first read of a source (a stream's first record of each command,
// on every connection; the first scrape of a Sources, or the first after
// the scraped service restarted) is a baseline: what it shows is the
// starting point, not news. Its counters are not counted as calls and its
// state is reported as the current state, in the window, with no
// transition (so the collector opens no incident and counts no trip).
// Transitions come only from what changed between two reads; a failed
// scrape is no new start (see promReader). (opossum-prometheus has no
// state gauge: see promBreaker.opossumState for its state at a baseline.)
//
// What a pull source cannot do is said on the breaker: its state is
// sampled (BreakerConfig.Sampled: a transition is seen at the next read,
// a short one between two reads is missed, and a Hystrix stream shows
// half-open as open), a Hystrix stream's counts are estimated from its
// rolling window (BreakerConfig.Estimated; rolling.go), and it cannot be
// held (HoldsUnsupported: nothing goes back to the service). A Turbine
// stream is one target standing for a cluster of hosts (Window.Hosts:
// hystrixvalues.go reads Turbine's forms, cluster.go its hystrix-go
// hosts one by one).
package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Kinds of Target.
const (
	KindHystrix    = "hystrix"    // a text/event-stream of Hystrix metrics (/hystrix.stream)
	KindPrometheus = "prometheus" // a Prometheus text exposition (/metrics), scraped
)

// Sink takes what a source read; *collector.Collector is one (Ingest).
// An error that wraps cbdash.ErrInvalid refuses the batch for good;
// another is trouble of the sink's (the batch is dropped and counted).
type Sink interface {
	Ingest(ctx context.Context, h *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, error)
}

// readySink is a Sink that says when it starts taking batches
// (*collector.Collector: once Run has restored its state). A source
// waits for it before sending, rather than have its first batches
// refused.
type readySink interface {
	Sink
	// Ready is closed once the sink takes batches.
	Ready() <-chan struct{}
}

// stateSink is a Sink that says what it last knew of a breaker
// (*collector.Collector: its live state, which after a restart is what
// the store held). A source asks it when a first read cannot tell a
// breaker's state (opossum-prometheus: see opossumCandidates), to keep
// what cbdash showed rather than guess.
type stateSink interface {
	Sink
	// Dependency returns the live state of one dependency, or an error
	// wrapping cbdash.ErrNotFound.
	Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error)
}

// Target is one endpoint to read: one instance of one service.
type Target struct {
	// Kind is KindHystrix or KindPrometheus; required.
	Kind string `json:"kind"`
	// URL is the stream or metrics endpoint (http or https); required.
	URL string `json:"url"`
	// Service is the service the breakers belong to; required.
	Service string `json:"service"`
	// Instance names the instance; "" = the URL's host:port.
	Instance string `json:"instance,omitempty"`
	// Header is sent with every request, typically
	// {"Authorization": "Bearer ..."}; nil sends none.
	Header map[string]string `json:"header,omitempty"`
	// Labels are the instance's labels (as an agent's hello carries).
	Labels map[string]string `json:"labels,omitempty"`
	// Interval is, for KindPrometheus, the time between scrapes; 0 = 5 s.
	// For KindHystrix it is how long the stream may stay silent before
	// it is reconnected, 0 = 10 s (streams send every second or so).
	Interval Duration `json:"interval,omitzero"`
}

// Duration is a time.Duration that reads and writes as text in JSON
// ("5s", "1m30s").
type Duration time.Duration

// UnmarshalJSON reads a duration string such as "5s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("interval %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

func (t *Target) validate(i int) error {
	bad := func(field, why string) error {
		return fmt.Errorf("source: %w: targets[%d].%s %s", cbdash.ErrInvalid, i, field, why)
	}
	if t.Kind != KindHystrix && t.Kind != KindPrometheus {
		return bad("kind", fmt.Sprintf("%q is not %q or %q", t.Kind, KindHystrix, KindPrometheus))
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("url", fmt.Sprintf("%q is not an http(s) URL", t.URL))
	}
	if strings.TrimSpace(t.Service) == "" {
		return bad("service", "is required")
	}
	// The names the hello will carry, checked as the collector checks
	// them (a refused hello would refuse every read of the target).
	names := []struct{ field, v string }{{"service", t.Service}}
	if t.Instance != "" {
		names = append(names, struct{ field, v string }{"instance", t.Instance})
	}
	for k, v := range t.Labels {
		names = append(names, struct{ field, v string }{"labels key", k}, struct{ field, v string }{fmt.Sprintf("labels[%q]", k), v})
	}
	for _, n := range names {
		if err := protocol.CheckName(n.field, n.v); err != nil {
			return fmt.Errorf("source: %w: targets[%d].%s", cbdash.ErrInvalid, i, strings.TrimPrefix(err.Error(), protocol.ErrInvalid.Error()+": "))
		}
	}
	if t.Interval < 0 {
		return bad("interval", "is negative")
	}
	for k := range t.Header {
		if strings.TrimSpace(k) == "" {
			return bad("header", "has an empty name")
		}
	}
	return nil
}

func (t *Target) instance() string {
	if t.Instance != "" {
		return t.Instance
	}
	u, _ := url.Parse(t.URL) // validated
	return u.Host
}

func (t *Target) interval() time.Duration {
	switch {
	case t.Interval > 0:
		return time.Duration(t.Interval)
	case t.Kind == KindPrometheus:
		return 5 * time.Second
	}
	return 10 * time.Second
}

// Config configures Sources. The zero value of every field but Sink works.
type Config struct {
	// Sink takes every hello and batch; required.
	Sink Sink
	// Targets are the endpoints to read; none is allowed (Run then only
	// waits).
	Targets []Target
	// Clock stamps windows and transitions and times scrapes, silence and
	// back-off; nil = clock.System(). (HTTP timeouts are real time.)
	Clock clock.Clock
	// Logger receives connection trouble; nil discards it.
	Logger *slog.Logger
	// Client makes the requests; nil = a client with no overall timeout
	// (a stream lasts) whose connection attempt times out after 10 s.
	Client *http.Client
	// MinBackoff and MaxBackoff bound the wait before reconnecting to a
	// target that failed (exponential, with jitter); 0 = 500 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Registerer receives the sources' Prometheus series:
	// cbdash_source_records_refused_total{service, instance, reason}, the
	// records refused one by one (see RefusedMalformed and the other
	// Refused* reasons). nil registers nothing.
	Registerer prometheus.Registerer
}

// Reasons a record read from a source is refused (the reason label of
// cbdash_source_records_refused_total). A refused record is dropped on
// its own: the records before and after it, of its command or another
// one, go on to the collector.
const (
	// RefusedMalformed: a HystrixCommand record (or an event that is not
	// JSON) that does not decode: a number beyond float64 (1e400), a
	// string where a number goes.
	RefusedMalformed = "malformed"
	// RefusedOutOfRange: a number that no breaker can mean, more than
	// MaxRecordNumber in magnitude (1e308 in a count, a duration, a
	// latency).
	RefusedOutOfRange = "out_of_range"
	// RefusedInvalid: what the record maps to would be refused by the
	// collector (a name with an invisible character, no name, a latency
	// sum beyond the protocol's): the protocol's own checks.
	RefusedInvalid = "invalid"
	// RefusedTooLarge: a stream's event (one line, or its data lines
	// together) larger than 1 MiB. It is skipped to its end without being
	// held; the stream goes on.
	RefusedTooLarge = "too_large"
	// RefusedTooManyBreakers: a record of a new command when the target
	// already has protocol.MaxBreakersPerHello (1,000) breakers, the most
	// one instance's hello may declare. The records of the commands
	// already declared go on.
	RefusedTooManyBreakers = "too_many_breakers"
)

// MaxRecordNumber bounds every number of a record read from a source
// (in magnitude): 2^53, the largest integer JSON carries exactly across
// languages (JavaScript's Number.MAX_SAFE_INTEGER is 2^53-1, and opossum
// writes it as its semaphore's "no limit"). Counts above a window's 2^40
// are clamped, as are durations (int64 milliseconds hold 2^53).
const MaxRecordNumber float64 = 1 << 53

// refusedLogEvery is how often a target logs its refused records: the
// first at once, then one line a minute at most (of the clock), with the
// count since the line before.
const refusedLogEvery = time.Minute

// Sources reads every target of its Config until Run's context ends. Its
// methods are safe for concurrent use.
type Sources struct {
	cfg     Config
	clk     clock.Clock
	log     *slog.Logger
	runners []*runner
	refused *prometheus.CounterVec // by service, instance, reason
}

// New checks cfg and returns Sources ready to Run. Errors wrap
// cbdash.ErrInvalid and name the bad field ("targets[1].url ...").
func New(cfg Config) (*Sources, error) {
	if cfg.Sink == nil {
		return nil, fmt.Errorf("source: %w: Config.Sink is required", cbdash.ErrInvalid)
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 {
		return nil, fmt.Errorf("source: %w: Config.MinBackoff/MaxBackoff is negative", cbdash.ErrInvalid)
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Client == nil {
		cfg.Client = defaultClient()
	}
	s := &Sources{cfg: cfg, clk: clock.OrSystem(cfg.Clock), log: cfg.Logger,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_source_records_refused_total",
			Help: "Records read from a pull source (a Hystrix stream) refused one by one, by target service and instance and by reason (malformed, out_of_range, invalid, too_large, too_many_breakers); the rest of the stream goes on.",
		}, []string{"service", "instance", "reason"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.refused); err != nil {
			return nil, fmt.Errorf("source: registering the metrics: %w", err)
		}
	}
	seen := map[string]int{}
	for i := range cfg.Targets {
		t := cfg.Targets[i]
		if err := t.validate(i); err != nil {
			return nil, err
		}
		k := t.Service + "/" + t.instance()
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("source: %w: targets[%d] names instance %s again (as targets[%d]); set instance", cbdash.ErrInvalid, i, k, j)
		}
		seen[k] = i
		s.runners = append(s.runners, &runner{src: s, t: t, status: Status{Kind: t.Kind, URL: t.URL, Service: t.Service, Instance: t.instance()}})
	}
	return s, nil
}

func defaultClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 10 * time.Second
	return &http.Client{Transport: tr}
}

// Run reads every target, each on its own goroutine, reconnecting with
// back-off, until ctx ends; it returns once every goroutine has stopped,
// with nil.
func (s *Sources) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, r := range s.runners {
		wg.Go(func() { r.run(ctx) })
	}
	wg.Wait()
	return nil
}

// Status is what one target's reader has seen, for operators and tests.
type Status struct {
	Kind, URL, Service, Instance string
	// Connected is true while a stream is open (Hystrix) or the last
	// scrape succeeded (Prometheus).
	Connected bool
	// Reads counts the records (Hystrix: HystrixCommand records) or
	// scrapes read so far.
	Reads int64
	// Batches counts the batches the sink took; Dropped those it refused
	// or could not take.
	Batches, Dropped int64
	// Refused counts the records refused one by one (malformed, out of
	// range or invalid: see RefusedMalformed), which were not sent.
	Refused int64
	// Failures counts failed connections or scrapes; LastError is the
	// last one's error ("" after a success).
	Failures  int64
	LastError string
	// LastRead is when the last record or scrape was read (zero before).
	LastRead time.Time
}

// Status returns the status of every target, in the order of
// Config.Targets.
func (s *Sources) Status() []Status {
	out := make([]Status, len(s.runners))
	for i, r := range s.runners {
		r.mu.Lock()
		out[i] = r.status
		r.mu.Unlock()
	}
	return out
}

// runner reads one target.
type runner struct {
	src *Sources
	t   Target

	mu     sync.Mutex // guards the fields below
	status Status
	// What the reader remembers across reconnections (the rolling counts
	// already reported, the counters' last values).
	hystrix *hystrixReader
	prom    *promReader
	// Rate limits of the log lines that a stream could repeat many times
	// a second: refused records, batches the sink did not take.
	refusedLog, droppedLog everyLog
}

// everyLog lets a line be logged once every refusedLogEvery (of the
// clock) at most, and counts the events it stood for.
type everyLog struct {
	last time.Time // the last line; zero before the first
	n    int64     // events since the last line
}

// event counts an event at now and reports whether a line is due, with
// the events it stands for (this one and those since the last line).
func (l *everyLog) event(now time.Time) (n int64, due bool) {
	l.n++
	if !l.last.IsZero() && now.Sub(l.last) < refusedLogEvery {
		return 0, false
	}
	n, l.n, l.last = l.n, 0, now
	return n, true
}

// refuse counts a record refused at now for reason (a Refused* constant)
// and logs it, once a minute at most.
func (r *runner) refuse(ctx context.Context, now time.Time, reason string, err error) {
	r.src.refused.WithLabelValues(r.t.Service, r.t.instance(), reason).Inc()
	r.mu.Lock()
	r.status.Refused++
	n, due := r.refusedLog.event(now)
	r.mu.Unlock()
	if due {
		r.src.log.Log(ctx, slog.LevelWarn, "source: records refused", "kind", r.t.Kind, "url", r.t.URL, "service", r.t.Service,
			"instance", r.t.instance(), "refused", n, "every", refusedLogEvery, "reason", reason, "err", err)
	}
}

func (r *runner) update(f func(*Status)) {
	r.mu.Lock()
	f(&r.status)
	r.mu.Unlock()
}

// run reads the target until ctx ends: one connection (or scrape loop) at
// a time, waiting the back-off after a failure.
func (r *runner) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = r.src.cfg.MinBackoff, r.src.cfg.MaxBackoff
	em := newEmitter(r, r.src.clk.Now())
	for ctx.Err() == nil {
		var progressed bool
		var err error
		switch r.t.Kind {
		case KindHystrix:
			progressed, err = r.readHystrix(ctx, em)
		default:
			progressed, err = r.scrapeLoop(ctx, em)
		}
		if ctx.Err() != nil {
			return
		}
		if progressed {
			bo.Reset()
		}
		r.update(func(s *Status) {
			s.Connected = false
			s.Failures++
			if err != nil {
				s.LastError = err.Error()
			}
		})
		wait := bo.NextBackOff()
		r.src.log.Warn("source: reading failed; retrying", "kind", r.t.Kind, "url", r.t.URL, "err", err, "in", wait)
		if !sleep(ctx, r.src.clk, wait) {
			return
		}
	}
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clock.NewTimer(clk, d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// get sends a GET for the target with its header.
func (r *runner) get(ctx context.Context, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.t.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	for k, v := range r.t.Header {
		req.Header.Set(k, v)
	}
	resp, err := r.src.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", r.t.URL, resp.Status)
	}
	return resp, nil
}

// emitter turns one instance's reads into hellos and batches: it keeps
// the hello (the breakers seen so far) and the batch sequence.
type emitter struct {
	r     *runner
	hello protocol.Hello
	seq   uint64
	// dropped counts windows of batches the sink did not take, reported
	// in the next batch's Dropped.
	dropped int64
}

func newEmitter(r *runner, startedAt time.Time) *emitter {
	return &emitter{r: r, hello: protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version,
		Service: r.t.Service, Instance: r.t.instance(), Labels: r.t.Labels,
		SDKVersion: "cbdash source (" + r.t.Kind + ")", StartedAt: startedAt.UnixMilli(),
	}}
}

// canDeclare reports whether declare can take a breaker named name: it is
// declared already, or the hello has room for one more
// (protocol.MaxBreakersPerHello).
func (e *emitter) canDeclare(name string) bool {
	if len(e.hello.Breakers) < protocol.MaxBreakersPerHello {
		return true
	}
	for i := range e.hello.Breakers {
		if e.hello.Breakers[i].Name == name {
			return true
		}
	}
	return false
}

// declare adds or updates a breaker's configuration in the hello; a new
// one is left out when the hello is full (see canDeclare).
func (e *emitter) declare(c protocol.BreakerConfig) {
	for i := range e.hello.Breakers {
		if e.hello.Breakers[i].Name == c.Name {
			if e.hello.Breakers[i] != c {
				e.hello.Breakers = append([]protocol.BreakerConfig(nil), e.hello.Breakers...)
				e.hello.Breakers[i] = c
			}
			return
		}
	}
	if len(e.hello.Breakers) >= protocol.MaxBreakersPerHello {
		return
	}
	bs := append(append([]protocol.BreakerConfig(nil), e.hello.Breakers...), c)
	sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
	e.hello.Breakers = bs
}

// send hands a batch of windows and transitions, taken at now, to the
// sink. A refused batch is dropped (its windows counted in the next
// batch's Dropped); the sequence moves on only when one is taken.
func (e *emitter) send(ctx context.Context, now time.Time, ws []protocol.Window, ts []protocol.Transition) {
	if len(ws) == 0 && len(ts) == 0 {
		return
	}
	b := &protocol.Batch{Type: protocol.TypeBatch, Seq: e.seq + 1, SentAt: now.UnixMilli(), Windows: ws, Transitions: ts}
	if e.dropped > 0 {
		b.Dropped = &protocol.Dropped{Windows: e.dropped}
	}
	if !e.ready(ctx) {
		return
	}
	h := e.hello
	_, err := e.r.src.cfg.Sink.Ingest(ctx, &h, b)
	if err != nil {
		e.dropped += int64(len(ws))
		var n int64
		var due bool
		e.r.update(func(s *Status) {
			s.Dropped++
			if ctx.Err() == nil {
				n, due = e.r.droppedLog.event(now)
			}
		})
		if due { // once a minute at most: a stream reads a batch a second or more
			lvl := slog.LevelWarn
			if errors.Is(err, cbdash.ErrInvalid) {
				lvl = slog.LevelError
			}
			e.r.src.log.Log(ctx, lvl, "source: batch not taken", "url", e.r.t.URL, "service", h.Service, "instance", h.Instance,
				"batches", n, "every", refusedLogEvery, "err", err)
		}
		return
	}
	e.seq++
	e.dropped = 0
	e.r.update(func(s *Status) { s.Batches++ })
}

// ready waits until the sink takes batches (a readySink: sources start
// with the collector, which refuses batches until it has restored its
// state); false when ctx ended first.
func (e *emitter) ready(ctx context.Context) bool {
	rs, ok := e.r.src.cfg.Sink.(readySink)
	if !ok {
		return true
	}
	select {
	case <-rs.Ready():
		return true
	case <-ctx.Done():
		return false
	}
}

// knownState is the state the sink last knew of the target's breaker
// (see stateSink), once it is ready; "" when it knows none (a breaker it
// never saw, or a sink that cannot say).
func (e *emitter) knownState(ctx context.Context, breaker string) string {
	ss, ok := e.r.src.cfg.Sink.(stateSink)
	if !ok || !e.ready(ctx) {
		return ""
	}
	d, err := ss.Dependency(cbdash.DependencyKey{Service: e.hello.Service, Breaker: breaker})
	if err != nil {
		return ""
	}
	for _, ib := range d.PerInstance {
		if ib != nil && ib.Instance == e.hello.Instance {
			return ib.State
		}
	}
	return ""
}

// windowSpan is the window a read at now reports, the previous read of
// the breaker having been at prev (zero: none, the window is then
// fallback long).
func windowSpan(prev, now time.Time, fallback time.Duration) (start int64, millis int64) {
	d := fallback
	if !prev.IsZero() && now.After(prev) {
		d = now.Sub(prev)
	}
	ms := min(max(d.Milliseconds(), 1), protocol.MaxWindowMillis)
	return now.UnixMilli() - ms, ms
}

// clampPct keeps a rate within 0..100 (a library's -1, "not enough
// calls", reads as 0).
func clampPct(v float64) float64 {
	if v != v || v < 0 {
		return 0
	}
	return min(v, 100)
}
