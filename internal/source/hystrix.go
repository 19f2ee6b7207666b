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
// write too, and Turbine merges over a cluster's hosts). Each value takes
// the forms its writers give it (hystrixvalues.go): a number, or from
// Turbine a string holding one or the hosts' values.
type hystrixCommand struct {
	Type                 string      `json:"type"`
	Name                 string      `json:"name"`
	CurrentTime          hystrixNum  `json:"currentTime"`
	IsCircuitBreakerOpen hystrixBool `json:"isCircuitBreakerOpen"`
	ErrorPercentage      hystrixNum  `json:"errorPercentage"`
	ErrorCount           hystrixNum  `json:"errorCount"`
	RequestCount         hystrixNum  `json:"requestCount"`

	Success            hystrixNum `json:"rollingCountSuccess"`
	Failure            hystrixNum `json:"rollingCountFailure"`
	Timeout            hystrixNum `json:"rollingCountTimeout"`
	ShortCircuited     hystrixNum `json:"rollingCountShortCircuited"`
	SemaphoreRejected  hystrixNum `json:"rollingCountSemaphoreRejected"`
	ThreadPoolRejected hystrixNum `json:"rollingCountThreadPoolRejected"`
	BadRequests        hystrixNum `json:"rollingCountBadRequests"`
	FallbackSuccess    hystrixNum `json:"rollingCountFallbackSuccess"`
	FallbackFailure    hystrixNum `json:"rollingCountFallbackFailure"`

	Concurrent  hystrixNum            `json:"currentConcurrentExecutionCount"`
	LatencyMean hystrixNum            `json:"latencyExecute_mean"`
	Latency     map[string]hystrixNum `json:"latencyExecute"`

	VolumeThreshold  hystrixNum  `json:"propertyValue_circuitBreakerRequestVolumeThreshold"`
	SleepWindowMs    hystrixNum  `json:"propertyValue_circuitBreakerSleepWindowInMilliseconds"`
	ErrorThreshold   hystrixNum  `json:"propertyValue_circuitBreakerErrorThresholdPercentage"`
	ForceOpen        hystrixBool `json:"propertyValue_circuitBreakerForceOpen"`
	ForceClosed      hystrixBool `json:"propertyValue_circuitBreakerForceClosed"`
	Isolation        hystrixText `json:"propertyValue_executionIsolationStrategy"`
	ThreadTimeoutMs  hystrixNum  `json:"propertyValue_executionIsolationThreadTimeoutInMilliseconds"`
	TimeoutMs        hystrixNum  `json:"propertyValue_executionTimeoutInMilliseconds"`
	RollingWindowMs  hystrixNum  `json:"propertyValue_metricsRollingStatisticalWindowInMilliseconds"`
	RollingBuckets   hystrixNum  `json:"propertyValue_metricsRollingStatisticalWindowBuckets"`
	SemaphoreMax     hystrixNum  `json:"propertyValue_executionIsolationSemaphoreMaxConcurrentRequests"`
	ReportingHosts   hystrixNum  `json:"reportingHosts"`
	CircuitBreakerOn hystrixBool `json:"propertyValue_circuitBreakerEnabled"`

	// Present in some writers' records only: they tell the writer
	// (rollingLayoutOf).
	ThreadPool json.RawMessage `json:"threadPool"`
	Emit       json.RawMessage `json:"rollingCountEmit"`
}

// hosts is how many hosts the record stands for: 1 for a service's own
// stream, reportingHosts for Turbine's (at most maxHosts).
func (c *hystrixCommand) hosts() float64 {
	return min(max(math.Round(c.ReportingHosts.v), 1), maxHosts)
}

// maxHosts bounds the hosts a record may stand for.
const maxHosts = protocol.MaxHosts

// cluster reports whether the record is a cluster's (Turbine's, of more
// than one host).
func (c *hystrixCommand) cluster() bool { return c.hosts() > 1 }

// hystrixBreaker is what a target's reader remembers of one command.
type hystrixBreaker struct {
	last  time.Time // the previous read; zero: the next read is a baseline (see hystrixReader.rebase)
	state string    // at the previous read ("" before the first)
	open  float64   // hosts open at the previous read
	gen   uint64
	// offset is the writer's clock less cbdash's at the last record that
	// carried a currentTime cbdash could use (see writerTime)
	offset    time.Duration
	hasOffset bool
	rolled    rollingCounts
	// slots are the hosts of a Turbine stream of hystrix-go hosts
	slots hostSlots
}

// hystrixReader maps one stream's records, command by command.
type hystrixReader struct {
	em       *emitter
	breakers map[string]*hystrixBreaker
	windows  []protocol.Window
	trans    []protocol.Transition
	pending  map[string]bool // commands in windows
	// connFirst is when the connection's first record was read (zero
	// before it): a command first seen newCommandAfter later is new.
	connFirst time.Time
}

// newCommandAfter is how long after a connection's first record a command
// seen for the first time is a new one, not part of the baseline: a
// stream writes every command about every second (hystrix-go 1 s,
// Hystrix 0.5 s by default, Turbine as its hosts do), and hystrix-go and
// Hystrix make a command's circuit at its first call. A new command's
// state is a change from closed (a service that starts against a dead
// dependency trips it within its first rolling window).
const newCommandAfter = 3 * time.Second

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
	hr.connFirst = time.Time{}
	for _, b := range hr.breakers {
		b.last = time.Time{}
		b.rolled, b.slots = rollingCounts{}, hostSlots{}
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
	if field, err := c.bad(); err != nil {
		hr.em.r.refuse(ctx, now, RefusedMalformed, fmt.Errorf("HystrixCommand %q: %s: %w", truncate(c.Name, 80), field, err))
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
	if hr.connFirst.IsZero() {
		hr.connFirst = now
	}
	b := hr.breakers[c.Name]
	if b == nil {
		b = &hystrixBreaker{}
		if now.Sub(hr.connFirst) >= newCommandAfter {
			// New since the connection began: from closed, not a
			// baseline (its counts are the rolling window's start).
			b.state, b.last = protocol.StateClosed, now.Add(-time.Second)
		}
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
	c.fields(func(name string, n *hystrixNum, _ error) bool {
		if n != nil && math.Abs(n.v) > MaxRecordNumber {
			field, v, bad = name, n.v, true
		}
		return !bad
	})
	return field, v, bad
}

// bad returns the first value of the record (by its JSON name) that could
// not be read, and why.
func (c *hystrixCommand) bad() (field string, err error) {
	c.fields(func(name string, _ *hystrixNum, e error) bool {
		if e != nil {
			field, err = name, e
		}
		return err == nil
	})
	return field, err
}

// fields calls f with the JSON name of each value of the record, its
// number (nil for a boolean or a string) and its error, until f returns
// false.
func (c *hystrixCommand) fields(f func(name string, n *hystrixNum, err error) bool) {
	rv := reflect.ValueOf(c).Elem()
	rt := rv.Type()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		var ok bool
		switch p := rv.Field(i).Addr().Interface().(type) {
		case *hystrixNum:
			ok = f(name, p, p.err)
		case *hystrixBool:
			ok = f(name, nil, p.err)
		case *hystrixText:
			ok = f(name, nil, p.err)
		default:
			continue
		}
		if !ok {
			return
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Latency)) {
		p := c.Latency[k]
		if !f("latencyExecute["+strconv.Quote(truncate(k, 20))+"]", &p, p.err) {
			return
		}
	}
}

// clone is a copy of b that shares no memory with it.
func (b *hystrixBreaker) clone() hystrixBreaker {
	c := *b
	c.rolled = b.rolled.clone()
	c.slots = b.slots.clone()
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

// hystrixState is the state a record shows, and how many of the hosts it
// stands for reported their circuit open. The stream cannot tell
// half-open from open: both are open. A cluster (Turbine) is open while
// one of its hosts is, forced open or closed when all of them are.
func hystrixState(c *hystrixCommand) (state string, open float64) {
	open = c.IsCircuitBreakerOpen.trueHosts(c.hosts())
	switch {
	case c.ForceOpen.v:
		return protocol.StateForcedOpen, open
	case c.ForceClosed.v:
		return protocol.StateForcedClosed, open
	case open > 0:
		return protocol.StateOpen, open
	}
	return protocol.StateClosed, open
}

// rollingWindow is the record's rolling window and bucket length
// (Hystrix's defaults, 10 s in buckets of 1 s, when it does not say).
func (c *hystrixCommand) rollingWindow() (window, bucket time.Duration) {
	hosts := c.hosts()
	window = 10 * time.Second
	if ms := c.RollingWindowMs.perHost(hosts); ms > 0 {
		window = time.Duration(ms * float64(time.Millisecond))
	}
	n := 10.0
	if b := math.Round(c.RollingBuckets.perHost(hosts)); b >= 1 {
		n = min(b, maxRollingBuckets)
	}
	return window, max(time.Duration(float64(window)/n), time.Millisecond)
}

// maxRollingBuckets bounds the buckets of a rolling window cbdash keeps an
// estimate of.
const maxRollingBuckets = 600

// Writers of Hystrix streams whose rolling counts cbdash reads each its
// own way (rollingLayoutOf).
const (
	writerHystrixGo = "hystrix-go"
	writerOpossum   = "opossum-hystrix"
	writerOther     = "Netflix Hystrix or another"
)

// rollingLayoutOf is how the record's writer keeps its rolling counts,
// and the writer, known by the fields it writes: Netflix Hystrix (Java)
// and its ports name the command's threadPool, opossum-hystrix writes
// rollingCountEmit without it, hystrix-go neither. The layout of a
// cluster's sums (Turbine) is its hosts' without hystrix-go's oldest
// bucket, which each host keeps or drops on its own.
func rollingLayoutOf(c *hystrixCommand) (rollingLayout, string) {
	window, bucket := c.rollingWindow()
	n := int(min(max(math.Round(float64(window)/float64(bucket)), 2), maxRollingBuckets))
	l := rollingLayout{bucket: bucket, buckets: n}
	switch {
	case len(c.ThreadPool) > 0:
		return l, writerOther
	case len(c.Emit) > 0:
		// opossum-hystrix writes a window of 10000 ms whatever opossum's
		// own (rollingCountTimeout, rollingCountBuckets): its defaults,
		// 10 buckets of 1 s, are taken.
		l.perRecord = true
		return l, writerOpossum
	}
	l.keepsOldest = !c.cluster()
	return l, writerHystrixGo
}

// writerTime is when the record was written, on the writer's clock that
// its rolling buckets follow: its currentTime (Unix ms) when it is within
// a day of cbdash's clock and later than the previous record's, else
// cbdash's clock moved by the writer's offset last seen (Turbine sums
// currentTime over the hosts or leaves it out).
func (b *hystrixBreaker) writerTime(c *hystrixCommand, now time.Time) time.Time {
	if ct := c.CurrentTime; !c.cluster() && ct.set && !ct.byHost && ct.v > 0 && ct.v < 1<<50 {
		t := time.UnixMilli(int64(ct.v))
		if d := t.Sub(now); d.Abs() < 24*time.Hour && (!b.rolled.started || t.After(b.rolled.last)) {
			b.offset, b.hasOffset = d, true
			return t
		}
	}
	if b.hasOffset {
		return now.Add(b.offset)
	}
	return now
}

// read maps a record read at now: the window of the events new since the
// previous read, and the transition when the state changed. A command's
// first record of a connection is its baseline: no event is new, and no
// transition is made.
func (b *hystrixBreaker) read(c *hystrixCommand, now time.Time) (protocol.Window, *protocol.Transition) {
	hosts := c.hosts()
	state, open := hystrixState(c)
	layout, writer := rollingLayoutOf(c)
	baseline := b.last.IsZero()
	rolled := [nRolled]int64{toCount(c.Success.v), toCount(c.Failure.v), toCount(c.Timeout.v), toCount(c.ShortCircuited.v),
		toCount(c.SemaphoreRejected.v), toCount(c.ThreadPoolRejected.v), toCount(c.BadRequests.v),
		toCount(c.FallbackSuccess.v), toCount(c.FallbackFailure.v), toCount(c.RequestCount.v), toCount(c.ErrorCount.v)}
	hints := rollingHints{cluster: c.cluster()}
	if writer == writerHystrixGo && !baseline && b.open > open {
		// hystrix-go clears a circuit's counts when it closes
		// (CircuitBreaker.setClose: metrics.Reset).
		if !c.cluster() {
			hints.cleared = true
		} else {
			// Those of the hosts that closed: most of the
			// short-circuited calls (and their fallbacks) were theirs.
			closed := (b.open - open) / b.open
			for i := range hints.share {
				hints.share[i] = (b.open - open) / hosts
			}
			for _, i := range []int{rollShortCircuited, rollFallbackSuccess, rollFallbackFailure} {
				hints.share[i] = closed
			}
		}
	}
	at := b.writerTime(c, now)
	var n [nRolled]int64
	ok := false
	if c.cluster() && writer == writerHystrixGo {
		l := layout
		l.keepsOldest = true
		n, ok = b.slots.read(now, l, rolled, int(hosts), open, b.open)
	}
	if !ok {
		n = b.rolled.read(at, layout, rolled, hints)
	}
	counts := protocol.Counts{
		Successes: n[rollSuccess], Errors: n[rollFailure], Timeouts: n[rollTimeout], Failures: n[rollFailure] + n[rollTimeout],
		RejectedOpen: n[rollShortCircuited], RejectedBulkhead: n[rollSemaphoreRejected] + n[rollThreadPoolRejected],
		Ignored: n[rollBadRequest], FallbackSuccess: n[rollFallbackSuccess], FallbackFailure: n[rollFallbackFailure],
	}
	counts.Admitted = counts.Successes + counts.Failures + counts.Ignored
	start, ms := windowSpan(b.last, now, time.Second)
	timed := counts.Successes + counts.Failures
	mean := c.LatencyMean.perHost(hosts)
	w := protocol.Window{
		Breaker: c.Name, Start: start, Millis: ms, State: state, Counts: counts,
		InFlight: toCount(c.Concurrent.v),
		Latency:  histogram(timed, c.quantiles(hosts), mean),
		Headroom: c.headroom(),
	}
	if c.cluster() {
		w.Hosts = &protocol.Hosts{Total: int64(hosts), Open: int64(min(open, hosts))}
	}
	if w.Latency != nil {
		w.LatencySumMs = float64(timed) * max(mean, 0)
	}
	var t *protocol.Transition
	if !baseline && b.state != state {
		b.gen++
		t = &protocol.Transition{Breaker: c.Name, From: b.state, To: state, At: now.UnixMilli(), Generation: b.gen, Cause: hystrixCause(c, b.state, state, open)}
		if state == protocol.StateOpen {
			t.OpenMillis = int64(max(c.SleepWindowMs.perHost(hosts), 0))
		}
	}
	b.state, b.open, b.last = state, open, now
	return w, t
}

// headroom is the rolling window of the record beside the thresholds. Of
// a cluster's record it is an average host's: the calls and failures per
// host (Turbine sums them), the cluster's error percentage, the settings
// of one host.
func (c *hystrixCommand) headroom() protocol.Headroom {
	hosts := c.hosts()
	rate := c.ErrorPercentage.perHost(hosts)
	if c.cluster() {
		rate = 0
		if c.RequestCount.v > 0 {
			rate = 100 * c.ErrorCount.v / c.RequestCount.v
		}
	}
	return protocol.Headroom{
		Calls: toCount(c.RequestCount.v / hosts), Failures: toCount(c.ErrorCount.v / hosts), MinimumCalls: toCount(c.VolumeThreshold.perHost(hosts)),
		FailureRate: clampPct(rate), FailureRateThreshold: clampPct(c.ErrorThreshold.perHost(hosts)),
	}
}

// hystrixCause explains a change the stream showed. Closed to open is
// Hystrix's own rule (error percentage at or over its threshold once the
// request volume is reached): library_rule, with the rolling window's
// figures. Any other change (open to closed: the single trial request
// succeeded; a forced state set or lifted), and any change of a cluster
// (whose hosts each judge their own window), is only seen, not
// explained: sampled.
func hystrixCause(c *hystrixCommand, from, to string, open float64) protocol.Cause {
	now := to
	if c.cluster() {
		now = fmt.Sprintf("%s (open on %d of %d hosts)", to, int64(open), int64(c.hosts()))
	}
	seen := "seen in the Hystrix stream: the circuit was " + now + " at this read, " + from + " at the one before"
	if from == protocol.StateClosed && to == protocol.StateOpen && !c.cluster() {
		h := c.headroom()
		return protocol.Cause{Kind: protocol.CauseLibraryRule, FailureRate: h.FailureRate, Threshold: h.FailureRateThreshold,
			WindowCalls: h.Calls, WindowFailed: h.Failures, Reason: seen}
	}
	return protocol.Cause{Kind: protocol.CauseSampled, Reason: seen}
}

// quantiles are the record's execution latency percentiles (of a
// cluster's record, the hosts' average: Turbine sums them).
func (c *hystrixCommand) quantiles(hosts float64) []quantile {
	var qs []quantile
	for k, v := range c.Latency {
		p, err := strconv.ParseFloat(k, 64)
		if err != nil || !v.set {
			continue
		}
		qs = append(qs, quantile{p / 100, v.perHost(hosts)})
	}
	return qs
}

// hystrixConfig is a command's configuration as its record shows it: the
// library's own properties as Settings (of one host, for a cluster's
// record), and what of cbdash's model they say.
func hystrixConfig(c *hystrixCommand) protocol.BreakerConfig {
	hosts := c.hosts()
	window, _ := c.rollingWindow()
	timeout := c.TimeoutMs.perHost(hosts)
	if timeout == 0 {
		timeout = c.ThreadTimeoutMs.perHost(hosts)
	}
	threshold, volume, sleep := c.ErrorThreshold.perHost(hosts), c.VolumeThreshold.perHost(hosts), c.SleepWindowMs.perHost(hosts)
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	settings := map[string]string{
		"circuitBreakerRequestVolumeThreshold":          num(volume),
		"circuitBreakerErrorThresholdPercentage":        num(threshold),
		"circuitBreakerSleepWindowInMilliseconds":       num(sleep),
		"metricsRollingStatisticalWindowInMilliseconds": num(window.Seconds() * 1000),
	}
	if c.Isolation.v != "" {
		settings["executionIsolationStrategy"] = c.Isolation.v
	}
	if timeout > 0 {
		settings["executionTimeoutInMilliseconds"] = num(timeout)
	}
	if c.CircuitBreakerOn.set && !c.CircuitBreakerOn.any() {
		settings["circuitBreakerEnabled"] = "false"
	}
	cfg := protocol.BreakerConfig{
		Name: c.Name, Library: LibraryHystrix, Settings: protocol.NewSettings(settings),
		WindowKind: protocol.WindowTime, WindowMillis: window.Milliseconds(),
		FailureRateThreshold: clampPct(threshold), MinimumCalls: int(toCount(volume)),
		OpenDurationMillis: int64(max(sleep, 0)), HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1,
		CallTimeoutMillis: int64(max(timeout, 0)),
		HoldsUnsupported:  true, Sampled: true, Estimated: true,
	}
	if c.Isolation.v == "SEMAPHORE" {
		cfg.MaxConcurrent = int(toCount(c.SemaphoreMax.perHost(hosts)))
	}
	return cfg
}
