package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// LibraryHystrix is BreakerConfig.Library of the breakers read from a
// Hystrix stream.
const LibraryHystrix = "Hystrix stream"

// hystrixCommand is the part of a Hystrix stream's HystrixCommand record
// that cbdash reads (the format of Netflix Hystrix's metrics event stream,
// which hystrix-go, opossum-hystrix, resilience4j and Envoy's Hystrix sink
// write too). Numbers are float64: some writers send fractions.
type hystrixCommand struct {
	Type                 string  `json:"type"`
	Name                 string  `json:"name"`
	IsCircuitBreakerOpen bool    `json:"isCircuitBreakerOpen"`
	ErrorPercentage      float64 `json:"errorPercentage"`
	ErrorCount           float64 `json:"errorCount"`
	RequestCount         float64 `json:"requestCount"`

	Success            float64 `json:"rollingCountSuccess"`
	Failure            float64 `json:"rollingCountFailure"`
	Timeout            float64 `json:"rollingCountTimeout"`
	ShortCircuited     float64 `json:"rollingCountShortCircuited"`
	SemaphoreRejected  float64 `json:"rollingCountSemaphoreRejected"`
	ThreadPoolRejected float64 `json:"rollingCountThreadPoolRejected"`
	BadRequests        float64 `json:"rollingCountBadRequests"`
	FallbackSuccess    float64 `json:"rollingCountFallbackSuccess"`
	FallbackFailure    float64 `json:"rollingCountFallbackFailure"`

	Concurrent  float64             `json:"currentConcurrentExecutionCount"`
	LatencyMean float64             `json:"latencyExecute_mean"`
	Latency     map[string]*float64 `json:"latencyExecute"`

	VolumeThreshold  float64 `json:"propertyValue_circuitBreakerRequestVolumeThreshold"`
	SleepWindowMs    float64 `json:"propertyValue_circuitBreakerSleepWindowInMilliseconds"`
	ErrorThreshold   float64 `json:"propertyValue_circuitBreakerErrorThresholdPercentage"`
	ForceOpen        bool    `json:"propertyValue_circuitBreakerForceOpen"`
	ForceClosed      bool    `json:"propertyValue_circuitBreakerForceClosed"`
	Isolation        string  `json:"propertyValue_executionIsolationStrategy"`
	ThreadTimeoutMs  float64 `json:"propertyValue_executionIsolationThreadTimeoutInMilliseconds"`
	TimeoutMs        float64 `json:"propertyValue_executionTimeoutInMilliseconds"`
	RollingWindowMs  float64 `json:"propertyValue_metricsRollingStatisticalWindowInMilliseconds"`
	RollingBuckets   float64 `json:"propertyValue_metricsRollingStatisticalWindowBuckets"`
	SemaphoreMax     float64 `json:"propertyValue_executionIsolationSemaphoreMaxConcurrentRequests"`
	ReportingHosts   float64 `json:"reportingHosts"`
	CircuitBreakerOn *bool   `json:"propertyValue_circuitBreakerEnabled"`
}

// hystrixBreaker is what a target's reader remembers of one command.
type hystrixBreaker struct {
	last  time.Time // the previous read; zero: the next read is a baseline (see hystrixReader.rebase)
	state string    // at the previous read ("" before the first)
	gen   uint64
	// one estimate per rolling count, in the order of counts()
	counts [9]rolling
}

// hystrixReader maps one stream's records, command by command.
type hystrixReader struct {
	em       *emitter
	breakers map[string]*hystrixBreaker
	windows  []protocol.Window
	trans    []protocol.Transition
	pending  map[string]bool // commands in windows
}

// readHystrix reads the target's stream until it ends, fails, stays
// silent for the target's interval, or ctx ends. progressed is true when
// at least one record was read.
func (r *runner) readHystrix(ctx context.Context, em *emitter) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := r.get(ctx, "text/event-stream")
	if err != nil {
		return false, err
	}
	r.update(func(s *Status) { s.Connected, s.LastError = true, "" })
	events := make(chan event, 256)
	readErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { readErr <- readEvents(resp.Body, events, ctx.Done()) })
	defer func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
	}()

	hr := r.hystrixReader(em)
	hr.rebase()
	silence := clock.NewTimer(r.src.clk, r.t.interval())
	defer silence.Stop()
	for {
		select {
		case <-ctx.Done():
			hr.flush(ctx)
			return progressed, ctx.Err()
		case <-silence.C:
			hr.flush(ctx)
			return progressed, fmt.Errorf("stream %s sent nothing for %v", r.t.URL, r.t.interval())
		case err := <-readErr:
			hr.flush(ctx)
			if err == nil {
				err = fmt.Errorf("stream %s ended", r.t.URL)
			}
			return progressed, err
		case ev := <-events:
			silence.Reset(r.t.interval())
			switch {
			case ev.tooLarge > 0:
				r.refuse(ctx, r.src.clk.Now(), RefusedTooLarge, fmt.Errorf("an event of at least %d bytes, more than %d, was skipped", ev.tooLarge, maxEventBytes))
			case hr.record(ctx, ev.data, r.src.clk.Now()):
				progressed = true
			}
			// Records of one tick come together: they make one batch,
			// sent once the reader has nothing more at hand.
			if len(events) == 0 {
				hr.flush(ctx)
			}
		}
	}
}

func (r *runner) hystrixReader(em *emitter) *hystrixReader {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hystrix == nil {
		r.hystrix = &hystrixReader{em: em, breakers: map[string]*hystrixBreaker{}, pending: map[string]bool{}}
	}
	return r.hystrix
}

// rebase makes the next record of every command a baseline: its rolling
// counts become the starting point (events of the last rolling window,
// not known to be new) and its state the current state, with no
// transition. A reader rebases at every connection: the first, and every
// reconnection (the service may have restarted, and what happened
// meanwhile cannot be placed in time).
func (hr *hystrixReader) rebase() {
	for _, b := range hr.breakers {
		b.last = time.Time{}
		b.counts = [len(b.counts)]rolling{}
	}
}

// maxEventBytes bounds one event of a stream (its data, and each line).
const maxEventBytes = 1 << 20

// event is what readEvents read of one event of a stream: its data, or
// (tooLarge > 0) that it was larger than maxEventBytes and skipped, with
// the bytes read of it.
type event struct {
	data     []byte
	tooLarge int64
}

// readEvents reads a text/event-stream and sends each event to out (the
// data of its data lines joined by newlines), until the stream ends
// (nil), fails, or done is closed. An event larger than maxEventBytes (a
// line, or its data lines together) is not kept: the rest of it is read
// and discarded, so that at most maxEventBytes of it are ever held, and
// out gets an event with tooLarge set; the events after it go on.
func readEvents(body io.Reader, out chan<- event, done <-chan struct{}) error {
	br := bufio.NewReaderSize(body, 64*1024)
	send := func(ev event) bool {
		select {
		case out <- ev:
			return true
		case <-done:
			return false
		}
	}
	var data []byte
	var skipped int64 // > 0: the event being read is too large, bytes read of it
	var buf []byte    // the line's buffer, reused: at most maxEventBytes+2
	for {
		var line []byte
		var n int64
		var err error
		line, buf, n, err = readLine(br, buf, maxEventBytes)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		switch {
		case n == 0: // a blank line ends an event
			if skipped > 0 {
				if !send(event{tooLarge: skipped}) {
					return nil
				}
			} else if len(data) > 0 {
				if !send(event{data: data}) {
					return nil
				}
			}
			data, skipped = nil, 0
			continue
		case skipped > 0:
			skipped += n
			continue
		case line == nil: // longer than maxEventBytes, discarded
			skipped = int64(len(data)) + n
			data = nil
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // comments (":ping"), event:, id:, retry:
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if len(data)+1+len(value) > maxEventBytes {
			skipped = int64(len(data)) + n
			data = nil
			continue
		}
		if data != nil {
			data = append(data, '\n')
		}
		data = append(data, value...)
	}
}

// readLine reads one line of br into buf (reused: returned for the next
// call) without its end (\n or \r\n), and returns it with its length n
// in bytes. A line longer than limit is read to its end and discarded:
// line is then nil, n its length; buf never holds more than limit+2
// bytes. err is io.EOF at the end of the stream (a last line without its
// end is dropped, as it ends no event).
func readLine(br *bufio.Reader, buf []byte, limit int) (line, _ []byte, n int64, err error) {
	buf = buf[:0]
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		n += int64(len(frag))
		if !long {
			if len(buf)+len(frag) > limit+2 { // +2: the line's end
				long, buf = true, buf[:0]
			} else {
				buf = append(buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, buf, 0, err
		}
		break
	}
	if long {
		return nil, buf, n, nil
	}
	line = bytes.TrimSuffix(buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > limit {
		return nil, buf, n, nil
	}
	return line, buf, int64(len(line)), nil
}

// record maps one event read at now; it reports whether it was a
// HystrixCommand record that was taken. Other records (HystrixThreadPool,
// Turbine's meta records) are skipped. A record that cannot be taken
// (malformed, a number out of range, or mapping to what the collector
// would refuse) is refused on its own, counted and logged (see
// runner.refuse): it changes nothing, and the records after it go on.
func (hr *hystrixReader) record(ctx context.Context, data []byte, now time.Time) bool {
	var c hystrixCommand
	err := json.Unmarshal(data, &c)
	var syntax *json.SyntaxError
	switch {
	case err != nil && (c.Type == "HystrixCommand" || errors.As(err, &syntax)):
		hr.em.r.refuse(ctx, now, RefusedMalformed, fmt.Errorf("a HystrixCommand record does not decode: %w", err))
		return false
	case c.Type != "HystrixCommand":
		return false
	}
	if field, v, bad := c.outOfRange(); bad {
		hr.em.r.refuse(ctx, now, RefusedOutOfRange, fmt.Errorf("HystrixCommand %q: %s is %g, beyond %g", truncate(c.Name, 80), field, v, MaxRecordNumber))
		return false
	}
	if c.Name == "" {
		hr.em.r.refuse(ctx, now, RefusedInvalid, errors.New("a HystrixCommand record without a name"))
		return false
	}
	if !hr.em.canDeclare(c.Name) {
		// The hello is full: a batch naming an undeclared breaker would
		// be refused whole, with the good records in it.
		hr.em.r.refuse(ctx, now, RefusedTooManyBreakers, fmt.Errorf("HystrixCommand %q: the stream has more commands than the %d one instance may declare", truncate(c.Name, 80), protocol.MaxBreakersPerHello))
		return false
	}
	b := hr.breakers[c.Name]
	if b == nil {
		b = &hystrixBreaker{}
	}
	was := b.clone()
	cfg := hystrixConfig(&c)
	w, t := b.read(&c, now)
	if err := hr.check(cfg, w, t, now); err != nil {
		*b = was // the record changes nothing
		hr.em.r.refuse(ctx, now, RefusedInvalid, fmt.Errorf("HystrixCommand %q: %w", truncate(c.Name, 80), err))
		return false
	}
	hr.breakers[c.Name] = b
	hr.em.r.update(func(s *Status) { s.Reads++; s.LastRead = now })
	if hr.pending[c.Name] {
		hr.flush(ctx) // a second record of one command: the first goes alone
	}
	hr.em.declare(cfg)
	hr.windows = append(hr.windows, w)
	if t != nil {
		hr.trans = append(hr.trans, *t)
	}
	hr.pending[c.Name] = true
	return true
}

// check reports whether the collector would take a record mapped to cfg,
// w and t (nil: no transition), read at now: the protocol's own checks of
// a hello declaring cfg and of a batch of w and t.
func (hr *hystrixReader) check(cfg protocol.BreakerConfig, w protocol.Window, t *protocol.Transition, now time.Time) error {
	h := hr.em.hello
	h.Breakers = []protocol.BreakerConfig{cfg}
	if err := h.Validate(); err != nil {
		return err
	}
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Windows: []protocol.Window{w}}
	if t != nil {
		b.Transitions = []protocol.Transition{*t}
	}
	return b.Validate(&h, 0)
}

// outOfRange returns the first number of the record (by its JSON name)
// beyond MaxRecordNumber in magnitude.
func (c *hystrixCommand) outOfRange() (field string, v float64, bad bool) {
	rv := reflect.ValueOf(c).Elem()
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rv.Field(i)
		if f.Kind() != reflect.Float64 {
			continue
		}
		if v := f.Float(); math.Abs(v) > MaxRecordNumber {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			return name, v, true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Latency)) {
		if p := c.Latency[k]; p != nil && math.Abs(*p) > MaxRecordNumber {
			return "latencyExecute[" + strconv.Quote(truncate(k, 20)) + "]", *p, true
		}
	}
	return "", 0, false
}

// clone is a copy of b that shares no memory with it.
func (b *hystrixBreaker) clone() hystrixBreaker {
	c := *b
	for i := range c.counts {
		c.counts[i].seen = slices.Clone(b.counts[i].seen)
	}
	return c
}

// truncate cuts s to at most n bytes (on a rune boundary), marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func (hr *hystrixReader) flush(ctx context.Context) {
	if len(hr.windows) == 0 && len(hr.trans) == 0 {
		return
	}
	hr.em.send(ctx, hr.em.r.src.clk.Now(), hr.windows, hr.trans)
	hr.windows, hr.trans = nil, nil
	clear(hr.pending)
}

// hystrixState is the state a record shows. The stream cannot tell
// half-open from open: both are open.
func hystrixState(c *hystrixCommand) string {
	switch {
	case c.ForceOpen:
		return protocol.StateForcedOpen
	case c.ForceClosed:
		return protocol.StateForcedClosed
	case c.IsCircuitBreakerOpen:
		return protocol.StateOpen
	}
	return protocol.StateClosed
}

// rollingWindow is the record's rolling window and bucket length
// (Hystrix's defaults, 10 s in buckets of 1 s, when it does not say).
func (c *hystrixCommand) rollingWindow() (window, bucket time.Duration) {
	window = 10 * time.Second
	if c.RollingWindowMs > 0 {
		window = time.Duration(c.RollingWindowMs) * time.Millisecond
	}
	n := 10.0
	if c.RollingBuckets >= 1 {
		n = c.RollingBuckets
	}
	return window, time.Duration(float64(window) / n)
}

// read maps a record read at now: the window of the events new since the
// previous read, and the transition when the state changed. A command's
// first record of a connection is its baseline: no event is new, and no
// transition is made.
func (b *hystrixBreaker) read(c *hystrixCommand, now time.Time) (protocol.Window, *protocol.Transition) {
	window, bucket := c.rollingWindow()
	rolled := [9]float64{c.Success, c.Failure, c.Timeout, c.ShortCircuited, c.SemaphoreRejected,
		c.ThreadPoolRejected, c.BadRequests, c.FallbackSuccess, c.FallbackFailure}
	baseline := b.last.IsZero()
	var n [9]int64
	for i, v := range rolled {
		n[i] = b.counts[i].observe(now, toCount(v), window, bucket)
	}
	if baseline {
		n = [9]int64{} // the starting point, remembered as seen now
	}
	counts := protocol.Counts{
		Successes: n[0], Errors: n[1], Timeouts: n[2], Failures: n[1] + n[2],
		RejectedOpen: n[3], RejectedBulkhead: n[4] + n[5],
		Ignored: n[6], FallbackSuccess: n[7], FallbackFailure: n[8],
	}
	counts.Admitted = counts.Successes + counts.Failures + counts.Ignored
	state := hystrixState(c)
	start, ms := windowSpan(b.last, now, time.Second)
	timed := counts.Successes + counts.Failures
	w := protocol.Window{
		Breaker: c.Name, Start: start, Millis: ms, State: state, Counts: counts,
		InFlight: toCount(c.Concurrent),
		Latency:  histogram(timed, c.quantiles(), c.LatencyMean),
		Headroom: protocol.Headroom{
			Calls: toCount(c.RequestCount), Failures: toCount(c.ErrorCount), MinimumCalls: toCount(c.VolumeThreshold),
			FailureRate: clampPct(c.ErrorPercentage), FailureRateThreshold: clampPct(c.ErrorThreshold),
		},
	}
	if w.Latency != nil {
		w.LatencySumMs = float64(timed) * max(c.LatencyMean, 0)
	}
	var t *protocol.Transition
	if !baseline && b.state != state {
		b.gen++
		t = &protocol.Transition{Breaker: c.Name, From: b.state, To: state, At: now.UnixMilli(), Generation: b.gen, Cause: hystrixCause(c, b.state, state)}
		if state == protocol.StateOpen {
			t.OpenMillis = int64(max(c.SleepWindowMs, 0))
		}
	}
	b.state, b.last = state, now
	return w, t
}

// hystrixCause explains a change the stream showed. Closed to open is
// Hystrix's own rule (error percentage at or over its threshold once the
// request volume is reached): library_rule, with the rolling window's
// figures. Any other change (open to closed: the single trial request
// succeeded; a forced state set or lifted) is only seen, not explained:
// sampled.
func hystrixCause(c *hystrixCommand, from, to string) protocol.Cause {
	seen := "seen in the Hystrix stream: the circuit was " + to + " at this read, " + from + " at the one before"
	if from == protocol.StateClosed && to == protocol.StateOpen {
		return protocol.Cause{Kind: protocol.CauseLibraryRule, FailureRate: clampPct(c.ErrorPercentage), Threshold: clampPct(c.ErrorThreshold),
			WindowCalls: toCount(c.RequestCount), WindowFailed: toCount(c.ErrorCount), Reason: seen}
	}
	return protocol.Cause{Kind: protocol.CauseSampled, Reason: seen}
}

// quantiles are the record's execution latency percentiles.
func (c *hystrixCommand) quantiles() []quantile {
	var qs []quantile
	for k, v := range c.Latency {
		p, err := strconv.ParseFloat(k, 64)
		if err != nil || v == nil {
			continue
		}
		qs = append(qs, quantile{p / 100, *v})
	}
	return qs
}

// hystrixConfig is a command's configuration as its record shows it: the
// library's own properties as Settings, and what of cbdash's model they
// say.
func hystrixConfig(c *hystrixCommand) protocol.BreakerConfig {
	window, _ := c.rollingWindow()
	timeout := c.TimeoutMs
	if timeout == 0 {
		timeout = c.ThreadTimeoutMs
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	settings := map[string]string{
		"circuitBreakerRequestVolumeThreshold":          num(c.VolumeThreshold),
		"circuitBreakerErrorThresholdPercentage":        num(c.ErrorThreshold),
		"circuitBreakerSleepWindowInMilliseconds":       num(c.SleepWindowMs),
		"metricsRollingStatisticalWindowInMilliseconds": num(window.Seconds() * 1000),
	}
	if c.Isolation != "" {
		settings["executionIsolationStrategy"] = c.Isolation
	}
	if timeout > 0 {
		settings["executionTimeoutInMilliseconds"] = num(timeout)
	}
	if c.CircuitBreakerOn != nil && !*c.CircuitBreakerOn {
		settings["circuitBreakerEnabled"] = "false"
	}
	cfg := protocol.BreakerConfig{
		Name: c.Name, Library: LibraryHystrix, Settings: protocol.NewSettings(settings),
		WindowKind: protocol.WindowTime, WindowMillis: window.Milliseconds(),
		FailureRateThreshold: clampPct(c.ErrorThreshold), MinimumCalls: int(toCount(c.VolumeThreshold)),
		OpenDurationMillis: int64(max(c.SleepWindowMs, 0)), HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1,
		CallTimeoutMillis: int64(max(timeout, 0)),
		HoldsUnsupported:  true, Sampled: true,
	}
	if c.Isolation == "SEMAPHORE" {
		cfg.MaxConcurrent = int(toCount(c.SemaphoreMax))
	}
	return cfg
}
