package e2e_test

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/afex/hystrix-go/hystrix"
	metricCollector "github.com/afex/hystrix-go/hystrix/metric_collector"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// The long runs below run hystrix-go, its StreamHandler and cbdash's
// source in a testing/synctest bubble: hystrix-go keeps time with
// time.Now and time.Tick, which in the bubble are the bubble's clock, so
// minutes of calls at 20 a second run in seconds. The stream goes from
// hystrix-go's own handler to the source through an in-memory pipe
// (handlerTransport): a socket would block the bubble's clock.

// handlerTransport is an http.RoundTripper that serves each request with
// handler in the process, its response body an in-memory pipe. The
// handler sees the request's context end when the client closes the
// body (as a server sees the connection close).
type handlerTransport struct{ handler http.Handler }

func (ht handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	pr, pw := io.Pipe()
	rw := &pipeWriter{header: http.Header{}, pw: pw, headerSent: make(chan struct{}), closed: make(chan bool)}
	go func() {
		<-ctx.Done()
		close(rw.closed)
	}()
	go func() {
		defer cancel()
		ht.handler.ServeHTTP(rw, req.WithContext(ctx))
		rw.sendHeader()
		pw.Close()
	}()
	select {
	case <-rw.headerSent:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &http.Response{StatusCode: rw.status, Status: http.StatusText(rw.status), Header: rw.header,
		Body: &pipeBody{PipeReader: pr, cancel: cancel}, Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}

// pipeWriter is the http.ResponseWriter of handlerTransport, with the
// Flusher and CloseNotifier hystrix-go's StreamHandler asks for.
type pipeWriter struct {
	header     http.Header
	pw         *io.PipeWriter
	once       sync.Once
	status     int
	headerSent chan struct{}
	closed     chan bool
}

func (w *pipeWriter) Header() http.Header { return w.header }
func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() { w.status = code; close(w.headerSent) })
}
func (w *pipeWriter) sendHeader() { w.WriteHeader(http.StatusOK) }
func (w *pipeWriter) Write(b []byte) (int, error) {
	w.sendHeader()
	return w.pw.Write(b)
}
func (w *pipeWriter) Flush()                   { w.sendHeader() }
func (w *pipeWriter) CloseNotify() <-chan bool { return w.closed }

// recordingSink keeps every window the source sends, by breaker.
type recordingSink struct {
	mu      sync.Mutex
	windows map[string][]protocol.Window
	hellos  []protocol.Hello
}

func (s *recordingSink) Ingest(_ context.Context, h *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.windows == nil {
		s.windows = map[string][]protocol.Window{}
	}
	for _, w := range b.Windows {
		s.windows[w.Breaker] = append(s.windows[w.Breaker], w)
	}
	s.hellos = append(s.hellos, *h)
	return protocol.IngestResponse{}, nil
}

func (s *recordingSink) of(breaker string) []protocol.Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.Window(nil), s.windows[breaker]...)
}

// libraryTotals are hystrix-go's own counts of a command: a metric
// collector it feeds every call's result, as it feeds the one its stream
// reads, registered for every circuit (metricCollector.Registry).
type libraryTotals struct {
	mu     sync.Mutex
	counts protocol.Counts
	// successes by second (Unix) of hystrix-go's clock
	bySecond map[int64]int64
	// every call's counts, when hystrix-go counted it, and when it
	// cleared its counts (Reset: its circuit closed)
	calls  []timedCounts
	resets []time.Time
}

type timedCounts struct {
	at time.Time
	c  protocol.Counts
}

func (l *libraryTotals) Update(r metricCollector.MetricResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := func(v float64) int64 { return int64(v) }
	c := protocol.Counts{Successes: n(r.Successes), Errors: n(r.Failures), Timeouts: n(r.Timeouts), RejectedOpen: n(r.ShortCircuits),
		RejectedBulkhead: n(r.Rejects), FallbackSuccess: n(r.FallbackSuccesses), FallbackFailure: n(r.FallbackFailures)}
	l.counts.Add(c)
	l.calls = append(l.calls, timedCounts{time.Now(), c})
	if r.Successes > 0 {
		l.bySecond[time.Now().Unix()] += n(r.Successes)
	}
}

// Reset is called when the circuit closes (and clears its counts): the
// totals go on.
func (l *libraryTotals) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resets = append(l.resets, time.Now())
}

// unseen is the counts of the calls no record of a stream that ticks at
// first, first+1s... showed: those between a tick and a clearing of the
// counts before the next tick (hystrix-go's stream reads the counts as
// they are at each tick, and the clearing empties its window).
func (l *libraryTotals) unseen(first time.Time) (u protocol.Counts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.resets {
		if r.Before(first) {
			continue
		}
		tick := first.Add(r.Sub(first).Truncate(time.Second)) // the last at or before r
		for _, c := range l.calls {
			if c.at.After(tick) && c.at.Before(r) {
				u.Add(c.c)
			}
		}
	}
	return u
}

func (l *libraryTotals) get() (protocol.Counts, map[int64]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[int64]int64, len(l.bySecond))
	for k, v := range l.bySecond {
		m[k] = v
	}
	return l.counts, m
}

var (
	totalsMu sync.Mutex
	totals   = map[string]*libraryTotals{}
	register sync.Once
)

// countTotals makes hystrix-go keep its own counts (totalsOf) of the
// circuits it creates from now on.
func countTotals() {
	register.Do(func() {
		metricCollector.Registry.Register(func(name string) metricCollector.MetricCollector {
			totalsMu.Lock()
			defer totalsMu.Unlock()
			l := &libraryTotals{bySecond: map[int64]int64{}}
			totals[name] = l
			return l
		})
	})
}

// totalsOf is hystrix-go's own counts of command (see countTotals).
func totalsOf(command string) *libraryTotals {
	totalsMu.Lock()
	defer totalsMu.Unlock()
	return totals[command]
}

// endCircuits stops the goroutines hystrix-go started for the commands'
// circuits (it never stops them: a bubble must end with none), once their
// calls are over, and forgets every circuit. The channels they range over
// are unexported fields, reached by reflection.
func endCircuits(t *testing.T, commands ...string) {
	t.Helper()
	for _, c := range commands {
		endCircuit(t, c)
	}
	hystrix.Flush()
}

func endCircuit(t *testing.T, command string) {
	t.Helper()
	cb, _, err := hystrix.GetCircuit(command)
	if err != nil {
		t.Fatal(err)
	}
	closeField := func(v reflect.Value, path ...string) {
		for _, f := range path {
			if v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			v = v.FieldByName(f)
		}
		reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Close()
	}
	v := reflect.ValueOf(cb)
	closeField(v, "metrics", "Updates")
	closeField(v, "executorPool", "Metrics", "Updates")
}
