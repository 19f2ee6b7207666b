package source_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The rule these tests hold every source kind to: the first read of a
// connection (the first of a cbdash, the first after a reconnection or a
// restart of cbdash) is a baseline. Its counters are the starting point,
// its state the current state; no transition is made, so no incident
// opens and no trip is counted. Transitions come from changes seen
// between two reads.

// stopOnce runs run on its own goroutine until the returned stop is
// called (or the test ends); stop waits for it and fails t on its error.
func stopOnce(t *testing.T, what string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// cbdashRun is one run of cbdash: its stack, incident detection as
// cmd/cbdash runs it, and its sources.
type cbdashRun struct {
	st   *stacktest.Stack
	src  *source.Sources
	stop func()
}

// startCbdash starts cbdash on the database at path (a new one, or the
// one a stopped run left) with targets.
func startCbdash(t *testing.T, path string, clk clock.Clock, targets ...source.Target) *cbdashRun {
	t.Helper()
	st := stacktest.Start(t, stacktest.Options{Path: path, Clock: clk,
		Collector: func(c *collector.Config) { c.StaleAfter = time.Minute }})
	inc, err := incident.NewService(incident.ServiceConfig{Source: st.Collector, Store: st.Store, Clock: clk, Tick: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopInc := stopOnce(t, "incident run", inc.Run)
	src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, MaxBackoff: time.Second, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	stopSrc := stopOnce(t, "sources run", src.Run)
	return &cbdashRun{st: st, src: src, stop: func() { stopSrc(); stopInc(); st.Stop() }}
}

func (c *cbdashRun) dep(t *testing.T, service, breaker string) cbdash.Dependency {
	t.Helper()
	d, ok := dependency(t, c.st, service, breaker)
	if !ok {
		t.Fatalf("%s/%s is not on the dashboard", service, breaker)
	}
	return d
}

func (c *cbdashRun) transitions(t *testing.T, service, breaker string) []cbdash.TransitionRecord {
	t.Helper()
	trs, err := c.st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: service, Breaker: breaker, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return trs
}

func (c *cbdashRun) incidents(t *testing.T, service, breaker string) []cbdash.Incident {
	t.Helper()
	incs, err := c.st.Store.Incidents(context.Background(), cbdash.IncidentQuery{Service: service, Breaker: breaker})
	if err != nil {
		t.Fatal(err)
	}
	return incs
}

// baseline checks that service/breaker shows state, no count, no trip
// today, and has no stored transition and no incident.
func (c *cbdashRun) baseline(t *testing.T, service, breaker, state string) {
	t.Helper()
	d := c.dep(t, service, breaker)
	if d.State != state || d.Recent != (protocol.Counts{}) || d.OpensToday != 0 {
		t.Errorf("%s/%s: state %q, counts %+v, opens today %d; want %q, none, 0", service, breaker, d.State, d.Recent, d.OpensToday, state)
	}
	if trs := c.transitions(t, service, breaker); len(trs) != 0 {
		t.Errorf("%s/%s: %d transitions stored, want none; the first: %+v", service, breaker, len(trs), trs[0])
	}
	if incs := c.incidents(t, service, breaker); len(incs) != 0 {
		t.Errorf("%s/%s: %d incidents, want none: %+v", service, breaker, len(incs), incs)
	}
}

// switchProxy is a reverse proxy on loopback to a backend the test
// switches: a service restarted on another port behind one address.
type switchProxy struct {
	*httptest.Server
	backend atomic.Pointer[url.URL]
}

func newSwitchProxy(t *testing.T, backend string) *switchProxy {
	t.Helper()
	p := &switchProxy{}
	p.to(t, backend)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(p.backend.Load()) },
		FlushInterval: -1, // a stream goes through as it comes
		Transport:     tr,
		ErrorLog:      log.New(io.Discard, "", 0), // a stopped backend's stream ends mid-body
	}
	p.Server = httptest.NewServer(rp)
	t.Cleanup(func() {
		p.CloseClientConnections()
		p.Close()
		tr.CloseIdleConnections()
	})
	return p
}

func (p *switchProxy) to(t *testing.T, backend string) {
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	p.backend.Store(u)
}

// cycle gives a breaker of the Node service its history (GET /cycle).
func cycle(t *testing.T, base, breaker, query, wantState string) {
	t.Helper()
	resp, err := http.Get(base + "/cycle?breaker=" + breaker + "&" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ State string }
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.State != wantState {
		t.Fatalf("cycle %s (%s): %+v, %v; want it %s", breaker, query, r, err, wantState)
	}
}

// TestNodeOpossumBaselines starts cbdash in front of a real Node service
// whose opossum breakers have a history: inventory went through 20
// cycles, each opening, failing a half-open trial, opening again and
// closing on the next trial (opossum-prometheus counts open 40, halfOpen
// 40, close 20: closed now); pricing through 20 cycles and a last trip
// (open 21, halfOpen 20, close 20: open now). Read through
// opossum-prometheus's metrics and opossum-hystrix's stream, at cbdash's
// first reads and again after a restart of cbdash on the same database,
// they show their states with no transition, no incident and no trip
// counted (cbdash used to replay the whole history at the first scrape:
// 80 transitions at one millisecond, an incident, and inventory
// half-open). A real trip after that is one transition and an incident;
// a restart of the service between two scrapes is no transition either.
func TestNodeOpossumBaselines(t *testing.T) {
	node1, stopNode1 := nodeService(t)
	cycle(t, node1, "inventory", "cycles=20&retrips=1&end=closed", "closed")
	cycle(t, node1, "pricing", "cycles=20&end=open", "open")
	proxy := newSwitchProxy(t, node1)

	clk := clocktest.NewRunning()
	path := storetest.Path(t)
	targets := []source.Target{
		{Kind: source.KindHystrix, URL: proxy.URL + "/hystrix.stream", Service: "shop", Instance: "shop-1", Interval: source.Duration(3 * time.Second)},
		{Kind: source.KindPrometheus, URL: proxy.URL + "/metrics", Service: "shop-metrics", Instance: "shop-1", Interval: source.Duration(200 * time.Millisecond)},
	}
	firstReads := func(c *cbdashRun) {
		t.Helper()
		// Two records of each breaker, three scrapes.
		reads := [2]int64{4, 3}
		for i, s := range c.src.Status() {
			reads[i] += s.Reads
		}
		eventually.True(t, "the first records and scrapes read", func() bool {
			s := c.src.Status()
			return s[0].Reads >= reads[0] && s[1].Reads >= reads[1]
		})
	}
	want := map[string]string{"inventory": protocol.StateClosed, "pricing": protocol.StateOpen}
	for run, name := range []string{"cbdash's first reads", "after a restart of cbdash on the same database"} {
		t.Run(name, func(t *testing.T) {
			c := startCbdash(t, path, clk, targets...)
			defer c.stop()
			firstReads(c)
			for _, service := range []string{"shop", "shop-metrics"} {
				for breaker, state := range want {
					c.baseline(t, service, breaker, state)
				}
			}
			if s := c.src.Status(); s[0].Dropped+s[1].Dropped != 0 || s[0].Failures+s[1].Failures != 0 {
				t.Errorf("run %d: status %+v, want every batch taken, no failure", run, s)
			}
		})
	}

	c := startCbdash(t, path, clk, targets...)
	defer c.stop()
	firstReads(c)
	t.Run("a trip after the baseline is one transition and an incident", func(t *testing.T) {
		for opened := false; !opened; {
			_, opened = call(t, node1, "inventory", "fail")
		}
		for _, service := range []string{"shop", "shop-metrics"} {
			eventually.True(t, service+"/inventory open with its incident", func() bool {
				// The transition is stored after it is published.
				return c.dep(t, service, "inventory").State == protocol.StateOpen && len(c.incidents(t, service, "inventory")) == 1 &&
					len(c.transitions(t, service, "inventory")) > 0
			})
			trs := c.transitions(t, service, "inventory")
			if len(trs) != 1 || trs[0].From != protocol.StateClosed || trs[0].To != protocol.StateOpen {
				t.Errorf("%s/inventory transitions %+v, want one closed > open", service, trs)
			}
			if d := c.dep(t, service, "inventory"); d.OpensToday != 1 {
				t.Errorf("%s/inventory opens today %d, want 1", service, d.OpensToday)
			}
		}
	})

	t.Run("a restart of the service is no transition", func(t *testing.T) {
		node2, _ := nodeService(t)
		proxy.to(t, node2)
		stopNode1() // its stream ends: cbdash reconnects, to node2
		if o, _ := call(t, node2, "pricing", "ok"); o != "success" {
			t.Fatalf("a call to the new process's pricing: %s, want success", o)
		}
		for _, service := range []string{"shop", "shop-metrics"} {
			eventually.True(t, service+"/pricing closed, as the new process's breaker is", func() bool {
				return c.dep(t, service, "pricing").State == protocol.StateClosed
			})
			if trs := c.transitions(t, service, "pricing"); len(trs) != 0 {
				t.Errorf("%s/pricing transitions %+v, want none", service, trs)
			}
			if incs := c.incidents(t, service, "pricing"); len(incs) != 0 {
				t.Errorf("%s/pricing incidents %+v, want none", service, incs)
			}
		}
	})
}

// resilience4jScrapes serves the recorded resilience4j expositions; the
// test sets which, or a failure (503).
type resilience4jScrapes struct {
	*httptest.Server
	body atomic.Pointer[string] // nil: 503
}

func newResilience4jScrapes(t *testing.T) *resilience4jScrapes {
	t.Helper()
	s := &resilience4jScrapes{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := s.body.Load()
		if b == nil {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(*b))
	}))
	t.Cleanup(s.Close)
	return s
}

// serve serves the recorded exposition file with the state gauge of
// each breaker in states set to that state, and the lines of extra after
// it.
func (s *resilience4jScrapes) serve(t *testing.T, file string, states map[string]string, extra ...string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		for name, state := range states {
			if rest, ok := strings.CutPrefix(l, `resilience4j_circuitbreaker_state{name="`+name+`",state="`); ok {
				st, _, _ := strings.Cut(rest, `"`)
				v := "0.0"
				if st == state {
					v = "1.0"
				}
				lines[i] = `resilience4j_circuitbreaker_state{name="` + name + `",state="` + st + `",} ` + v
			}
		}
	}
	body := strings.Join(append(lines, extra...), "\n") + "\n"
	s.body.Store(&body)
}

// TestResilience4jBaselines: the first scrape, the first after a restart
// of cbdash, and the first after a restart of the service
// (process_start_time_seconds changed) are baselines, whatever the state
// gauge and the counters did meanwhile. A failed scrape is not: a state
// gauge that changed across it, as between two scrapes, is a transition,
// and the calls counted meanwhile are counted. (The first scrape after a
// failed one used to be a baseline: a trip while one scrape timed out,
// likely when the service struggled, was never a transition.)
func TestResilience4jBaselines(t *testing.T) {
	scrapes := newResilience4jScrapes(t)
	clk := clocktest.Virtual()
	path := storetest.Path(t)
	target := source.Target{Kind: source.KindPrometheus, URL: scrapes.URL + "/actuator/prometheus", Service: "catalog", Instance: "catalog-1"}
	scraped := func(c *cbdashRun, what string, failures int64) {
		t.Helper()
		n := c.src.Status()[0].Batches
		eventually.True(t, what, func() bool {
			if s := c.src.Status()[0]; s.Batches > n && s.Failures >= failures {
				return true
			}
			clk.Advance(time.Second)
			return false
		})
	}
	transitioned := func(c *cbdashRun, breaker string, n int) []cbdash.TransitionRecord {
		t.Helper()
		eventually.True(t, breaker+"'s transitions stored", func() bool {
			// The transition is stored after it is published.
			return len(c.transitions(t, "catalog", breaker)) >= n
		})
		return c.transitions(t, "catalog", breaker)
	}

	scrapes.serve(t, "testdata/resilience4j-1.prom", nil) // backendA closed, backendB half-open
	c := startCbdash(t, path, clk, target)
	scraped(c, "the first scrape", 0)
	t.Run("the first scrape", func(t *testing.T) {
		c.baseline(t, "catalog", "backendA", protocol.StateClosed)
		c.baseline(t, "catalog", "backendB", protocol.StateHalfOpen)
	})

	scrapes.body.Store(nil)
	eventually.True(t, "a failed scrape", func() bool {
		if c.src.Status()[0].Failures > 0 {
			return true
		}
		clk.Advance(time.Second)
		return false
	})
	// Meanwhile backendA counted calls and backendB closed.
	scrapes.serve(t, "testdata/resilience4j-2.prom", map[string]string{"backendA": "closed", "backendB": "closed"})
	scraped(c, "the first scrape after the failed one", 1)
	t.Run("the first scrape after a failed one", func(t *testing.T) {
		if trs := transitioned(c, "backendB", 1); len(trs) != 1 || trs[0].From != protocol.StateHalfOpen || trs[0].To != protocol.StateClosed {
			t.Errorf("backendB transitions %+v, want one half-open > closed", trs)
		}
		if d := c.dep(t, "catalog", "backendB"); d.State != protocol.StateClosed {
			t.Errorf("backendB %q, want closed", d.State)
		}
		d := c.dep(t, "catalog", "backendA")
		if d.State != protocol.StateClosed || d.Recent.Successes != 2 || d.Recent.Failures != 6 || d.Recent.Ignored != 1 {
			t.Errorf("backendA: %q, counts %+v; want closed, the 2 successful, 6 failed and 1 ignored calls of the gap", d.State, d.Recent)
		}
		if trs := c.transitions(t, "catalog", "backendA"); len(trs) != 0 {
			t.Errorf("backendA transitions %+v, want none", trs)
		}
	})

	scrapes.serve(t, "testdata/resilience4j-2.prom", map[string]string{"backendB": "closed"}) // backendA opens
	t.Run("a state gauge that changed between two scrapes is a transition", func(t *testing.T) {
		eventually.True(t, "backendA open with its incident", func() bool {
			if c.dep(t, "catalog", "backendA").State == protocol.StateOpen && len(c.incidents(t, "catalog", "backendA")) == 1 &&
				len(c.transitions(t, "catalog", "backendA")) > 0 {
				return true
			}
			clk.Advance(time.Second)
			return false
		})
		trs := c.transitions(t, "catalog", "backendA")
		if len(trs) != 1 || trs[0].From != protocol.StateClosed || trs[0].To != protocol.StateOpen {
			t.Errorf("backendA transitions %+v, want one closed > open", trs)
		}
	})
	c.stop()

	// cbdash restarts; backendB is half-open again.
	scrapes.serve(t, "testdata/resilience4j-2.prom", nil, "process_start_time_seconds 1.7e+09")
	c = startCbdash(t, path, clk, target)
	defer c.stop()
	scraped(c, "the first scrape after a restart of cbdash", 0)
	t.Run("the first scrape after a restart of cbdash", func(t *testing.T) {
		if d := c.dep(t, "catalog", "backendA"); d.State != protocol.StateOpen || d.Recent != (protocol.Counts{}) || d.OpensToday != 1 {
			t.Errorf("backendA: state %q, counts %+v, opens today %d; want open, none, still 1", d.State, d.Recent, d.OpensToday)
		}
		if trs, incs := c.transitions(t, "catalog", "backendA"), c.incidents(t, "catalog", "backendA"); len(trs) != 1 || len(incs) != 1 {
			t.Errorf("backendA: %d transitions, %d incidents; want still 1 and 1", len(trs), len(incs))
		}
		if trs := c.transitions(t, "catalog", "backendB"); len(trs) != 1 {
			t.Errorf("backendB: %d transitions, want still 1", len(trs))
		}
		if d := c.dep(t, "catalog", "backendB"); d.State != protocol.StateHalfOpen || d.Recent != (protocol.Counts{}) {
			t.Errorf("backendB: state %q, counts %+v; want half-open, none", d.State, d.Recent)
		}
	})

	// The service restarts between two scrapes, its counters above the
	// last scrape's: backendB is closed in the new process.
	scrapes.serve(t, "testdata/resilience4j-2.prom", map[string]string{"backendB": "closed"}, "process_start_time_seconds 1.7000001e+09")
	scraped(c, "the first scrape after a restart of the service", 0)
	t.Run("the first scrape after a restart of the service", func(t *testing.T) {
		if d := c.dep(t, "catalog", "backendB"); d.State != protocol.StateClosed || d.Recent != (protocol.Counts{}) {
			t.Errorf("backendB: state %q, counts %+v; want closed, none", d.State, d.Recent)
		}
		if trs := c.transitions(t, "catalog", "backendB"); len(trs) != 1 {
			t.Errorf("backendB: %d transitions, want still 1: %+v", len(trs), trs)
		}
	})
}

// connStream is a Hystrix stream whose records the test writes to its
// latest connection (the records of scriptedStream go to whichever
// connection takes them: after a reconnection, maybe the one ending).
type connStream struct {
	*httptest.Server
	mu    sync.Mutex
	conns []chan string
}

func newConnStream(t *testing.T) *connStream {
	t.Helper()
	s := &connStream{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch := make(chan string)
		s.mu.Lock()
		s.conns = append(s.conns, ch)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": ping\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case rec := <-ch:
				_, _ = io.WriteString(w, "data: "+rec+"\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(func() {
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

func (s *connStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// latest is the latest connection's records, once there is one.
func (s *connStream) latest(t *testing.T) chan<- string {
	t.Helper()
	eventually.True(t, "a connection to the stream", func() bool { return s.count() > 0 })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[len(s.conns)-1]
}

// TestHystrixStreamBaselines: a command's first record of a connection
// (the first, the first after a reconnection, the first after a restart
// of cbdash) is a baseline: its rolling counts are not counted and its
// state is no transition. (The first record used to count its rolling
// window's events as new, and the first after a reconnection to make a
// transition of a change.)
func TestHystrixStreamBaselines(t *testing.T) {
	stream := newConnStream(t)
	clk := clocktest.Virtual()
	path := storetest.Path(t)
	target := source.Target{Kind: source.KindHystrix, URL: stream.URL + "/hystrix.stream", Service: "orders", Instance: "orders-1",
		Interval: source.Duration(30 * time.Second)}
	send := func(c *cbdashRun, rec cmd) {
		t.Helper()
		s := c.src.Status()[0]
		stream.latest(t) <- rec.json("GetOrder")
		eventually.True(t, "the record read and taken", func() bool {
			n := c.src.Status()[0]
			return n.Reads == s.Reads+1 && n.Batches == s.Batches+1
		})
	}
	tripped := cmd{open: true, success: 5, failure: 12, short: 4}

	c := startCbdash(t, path, clk, target)
	send(c, tripped)
	t.Run("the first record", func(t *testing.T) {
		c.baseline(t, "orders", "GetOrder", protocol.StateOpen)
	})

	t.Run("the first record after a reconnection", func(t *testing.T) {
		conns := stream.count()
		eventually.True(t, "the silent stream reconnected", func() bool {
			clk.Advance(time.Second)
			return stream.count() > conns
		})
		clk.Advance(time.Second)
		send(c, cmd{success: 7}) // closed meanwhile
		c.baseline(t, "orders", "GetOrder", protocol.StateClosed)
	})

	t.Run("a change between two records is a transition", func(t *testing.T) {
		clk.Advance(time.Second)
		send(c, cmd{open: true, success: 7, failure: 20})
		eventually.True(t, "GetOrder open with its incident", func() bool {
			return c.dep(t, "orders", "GetOrder").State == protocol.StateOpen && len(c.incidents(t, "orders", "GetOrder")) == 1 &&
				len(c.transitions(t, "orders", "GetOrder")) > 0
		})
		trs := c.transitions(t, "orders", "GetOrder")
		if len(trs) != 1 || trs[0].From != protocol.StateClosed || trs[0].To != protocol.StateOpen {
			t.Errorf("transitions %+v, want one closed > open", trs)
		}
		if d := c.dep(t, "orders", "GetOrder"); d.Recent.Failures != 20 || d.Recent.Successes != 0 {
			t.Errorf("counts %+v, want the 20 failures since the baseline", d.Recent)
		}
	})
	t.Run("a command first seen after the connection's first records is new", func(t *testing.T) {
		// hystrix-go makes a circuit at its first call: a command that
		// appears mid-connection already open tripped since.
		clk.Advance(5 * time.Second)
		s := c.src.Status()[0]
		stream.latest(t) <- tripped.json("GetPayment")
		eventually.True(t, "GetPayment open with its incident", func() bool {
			d, ok := dependency(t, c.st, "orders", "GetPayment")
			return c.src.Status()[0].Reads == s.Reads+1 && ok && d.State == protocol.StateOpen &&
				len(c.incidents(t, "orders", "GetPayment")) == 1 && len(c.transitions(t, "orders", "GetPayment")) > 0
		})
		if trs := c.transitions(t, "orders", "GetPayment"); len(trs) != 1 || trs[0].From != protocol.StateClosed || trs[0].To != protocol.StateOpen {
			t.Errorf("transitions %+v, want one closed > open", trs)
		}
	})
	c.stop()

	conns := stream.count()
	c = startCbdash(t, path, clk, target)
	defer c.stop()
	t.Run("the first record after a restart of cbdash", func(t *testing.T) {
		eventually.True(t, "the new cbdash connected", func() bool { return stream.count() > conns })
		clk.Advance(time.Second)
		send(c, cmd{success: 9}) // closed meanwhile
		if d := c.dep(t, "orders", "GetOrder"); d.State != protocol.StateClosed || d.Recent.Successes != 0 {
			t.Errorf("state %q, counts %+v; want closed, no new success", d.State, d.Recent)
		}
		if trs, incs := c.transitions(t, "orders", "GetOrder"), c.incidents(t, "orders", "GetOrder"); len(trs) != 1 || len(incs) != 1 {
			t.Errorf("%d transitions, %d incidents; want still 1 and 1", len(trs), len(incs))
		}
	})
}

// opossumExposition is opossum-prometheus's exposition of one breaker
// with these lifetime event counts.
func opossumExposition(breaker string, events map[string]int) string {
	var b strings.Builder
	b.WriteString("# HELP circuit A count of all circuit' events\n# TYPE circuit counter\n")
	for ev, n := range events {
		b.WriteString(`circuit{name="` + breaker + `",event="` + ev + `"} ` + strconv.Itoa(n) + "\n")
	}
	return b.String()
}

// TestOpossumBaselineKeepsTheShownState: where an opossum breaker's
// lifetime counts allow more than one state (open 3, halfOpen 3, close
// 2: closed, or half-open waiting for its trial call), the baseline after
// a restart of cbdash keeps the state the dashboard showed (half-open,
// seen happen before the restart), not the first that fits (closed).
func TestOpossumBaselineKeepsTheShownState(t *testing.T) {
	scrapes := newResilience4jScrapes(t)
	clk := clocktest.Virtual()
	path := storetest.Path(t)
	target := source.Target{Kind: source.KindPrometheus, URL: scrapes.URL + "/metrics", Service: "shop", Instance: "shop-1"}
	serve := func(events map[string]int) {
		body := opossumExposition("inventory", events)
		scrapes.body.Store(&body)
	}
	scraped := func(c *cbdashRun, what string) {
		t.Helper()
		n := c.src.Status()[0].Batches
		eventually.True(t, what, func() bool {
			if c.src.Status()[0].Batches > n {
				return true
			}
			clk.Advance(time.Second)
			return false
		})
	}
	history := map[string]int{"fire": 60, "success": 30, "failure": 25, "reject": 5, "open": 3, "halfOpen": 2, "close": 2}
	serve(history) // open: one open more than half-opens
	c := startCbdash(t, path, clk, target)
	scraped(c, "the first scrape")
	c.baseline(t, "shop", "inventory", protocol.StateOpen)
	history["halfOpen"]++
	serve(history)
	eventually.True(t, "inventory half-open", func() bool {
		if c.dep(t, "shop", "inventory").State == protocol.StateHalfOpen && len(c.transitions(t, "shop", "inventory")) == 1 {
			return true
		}
		clk.Advance(time.Second)
		return false
	})
	c.stop()

	c = startCbdash(t, path, clk, target)
	defer c.stop()
	scraped(c, "the first scrape after a restart of cbdash")
	if d := c.dep(t, "shop", "inventory"); d.State != protocol.StateHalfOpen {
		t.Errorf("inventory %q after a restart of cbdash, want half-open as the dashboard showed", d.State)
	}
	if trs := c.transitions(t, "shop", "inventory"); len(trs) != 1 {
		t.Errorf("inventory: %d transitions, want still 1: %+v", len(trs), trs)
	}
}

// TestNodeOpossumSlowCallsAfterATrip: a real opossum 10 breaker without
// halfOpen counted (opossum-prometheus's default) whose history leaves its
// state open or closed (open 5, close 2), open now, with two slow calls
// admitted before its trip. They end after cbdash's baseline, as
// successes with no event (opossum's open() does nothing when already
// open): that is not closed, so the rejects after them show it open.
// (cbdash used to take calls that ended with no event for closed, and
// then counted the rejects of a breaker it showed closed.)
func TestNodeOpossumSlowCallsAfterATrip(t *testing.T) {
	node, _ := nodeService(t)
	cycle(t, node, "catalog", "cycles=2&retrips=1&end=closed", "closed") // open 4, close 2
	_ = get(t, node+"/hold?breaker=catalog&n=2")
	cycle(t, node, "catalog", "cycles=0&end=open", "open") // open 5

	clk := clocktest.NewRunning()
	c := startCbdash(t, storetest.Path(t), clk, source.Target{Kind: source.KindPrometheus, URL: node + "/metrics",
		Service: "shop-metrics", Instance: "shop-1", Interval: source.Duration(100 * time.Millisecond)})
	defer c.stop()
	scrapes := func(n int64) {
		t.Helper()
		batches := c.src.Status()[0].Batches + n
		eventually.True(t, "scrapes read and taken", func() bool { return c.src.Status()[0].Batches >= batches })
	}
	scrapes(1)
	c.baseline(t, "shop-metrics", "catalog", protocol.StateClosed) // open or closed: closed first

	_ = get(t, node+"/release") // the slow calls end, while open
	scrapes(2)
	for range 3 {
		if o, _ := call(t, node, "catalog", "ok"); o != "reject" {
			t.Fatalf("a call to the open catalog breaker: %s, want reject", o)
		}
	}
	eventually.True(t, "catalog open, its 3 rejects counted as open's", func() bool {
		d := c.dep(t, "shop-metrics", "catalog")
		return d.State == protocol.StateOpen && d.Recent.RejectedOpen == 3
	})
	if d := c.dep(t, "shop-metrics", "catalog"); d.Recent.Successes != 2 {
		t.Errorf("catalog counts %+v, want the 2 slow calls' successes", d.Recent)
	}
}
