package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// scriptedStream is a Hystrix stream whose records the test writes: the
// far side of a process boundary (what hystrix-go's StreamHandler or
// Spring's /hystrix.stream would send), in the stream's own format.
type scriptedStream struct {
	*httptest.Server
	records chan string
	mu      sync.Mutex
	auth    []string // Authorization of each request
}

func newScriptedStream(t *testing.T) *scriptedStream {
	t.Helper()
	s := &scriptedStream{records: make(chan string)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": ping\n\nretry: 500\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case rec, ok := <-s.records:
				if !ok {
					return
				}
				_, _ = io.WriteString(w, "data: "+rec+"\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scriptedStream) connections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// cmd is a HystrixCommand record as hystrix-go writes it.
type cmd struct {
	open                                                                        bool
	success, failure, timeout, short, semaphore, pool, bad, fbSuccess, fbFailed int
}

func (c cmd) json(name string) string {
	req := c.success + c.failure + c.timeout + c.short + c.semaphore + c.pool
	errs := c.failure + c.timeout + c.short + c.semaphore + c.pool
	pct := 0
	if req > 0 {
		pct = 100 * errs / req
	}
	m := map[string]any{
		"type": "HystrixCommand", "name": name, "group": name, "currentTime": clocktest.Epoch().UnixMilli(), "reportingHosts": 1,
		"requestCount": req, "errorCount": errs, "errorPercentage": pct, "isCircuitBreakerOpen": c.open,
		"rollingCountSuccess": c.success, "rollingCountFailure": c.failure, "rollingCountTimeout": c.timeout,
		"rollingCountShortCircuited": c.short, "rollingCountSemaphoreRejected": c.semaphore, "rollingCountThreadPoolRejected": c.pool,
		"rollingCountBadRequests": c.bad, "rollingCountFallbackSuccess": c.fbSuccess, "rollingCountFallbackFailure": c.fbFailed,
		"currentConcurrentExecutionCount":                             0,
		"latencyExecute_mean":                                         20,
		"latencyExecute":                                              map[string]int{"0": 1, "25": 10, "50": 20, "75": 30, "90": 40, "95": 45, "99": 60, "99.5": 70, "100": 80},
		"propertyValue_circuitBreakerRequestVolumeThreshold":          20,
		"propertyValue_circuitBreakerSleepWindowInMilliseconds":       5000,
		"propertyValue_circuitBreakerErrorThresholdPercentage":        50,
		"propertyValue_circuitBreakerForceOpen":                       false,
		"propertyValue_circuitBreakerForceClosed":                     false,
		"propertyValue_executionIsolationStrategy":                    "THREAD",
		"propertyValue_executionIsolationThreadTimeoutInMilliseconds": 1000,
		"propertyValue_metricsRollingStatisticalWindowInMilliseconds": 10000,
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// runSources runs src until the test ends.
func runSources(t *testing.T, src *source.Sources) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sources run: %v", err)
		}
	})
}

func dependency(t *testing.T, st *stacktest.Stack, service, breaker string) (cbdash.Dependency, bool) {
	t.Helper()
	d, err := st.Collector.Dependency(cbdash.DependencyKey{Service: service, Breaker: breaker})
	return d, err == nil
}

func TestHystrixStream(t *testing.T) {
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.StaleAfter = 5 * time.Second },
		Web:       func(c *web.Config) { c.Anonymous = true }})
	stream := newScriptedStream(t)
	src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: stream.URL + "/hystrix.stream", Service: "orders", Instance: "orders-1",
		Header: map[string]string{"Authorization": "Bearer s3cret"}, Interval: source.Duration(30 * time.Second),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	runSources(t, src)

	send := func(c cmd) {
		t.Helper()
		reads := src.Status()[0].Reads
		stream.records <- c.json("GetOrder")
		eventually.True(t, "the record read and ingested", func() bool {
			s := src.Status()[0]
			return s.Reads == reads+1 && s.Batches+s.Dropped == reads+1
		})
		if s := src.Status()[0]; s.Dropped > 0 {
			t.Fatalf("the collector refused a batch: %+v", s)
		}
	}
	recent := func() protocol.Counts {
		t.Helper()
		d, ok := dependency(t, st, "orders", "GetOrder")
		if !ok {
			t.Fatal("orders/GetOrder is not on the dashboard")
		}
		return d.Recent
	}

	t.Run("rolling counts become the calls new since the previous read", func(t *testing.T) {
		send(cmd{success: 3}) // the baseline: 3 calls of the last rolling window, not counted
		if got := recent(); got != (protocol.Counts{}) {
			t.Errorf("dashboard counts %+v after the first record, want none (its counts are the baseline)", got)
		}
		clk.Advance(time.Second)
		send(cmd{success: 5, failure: 2, timeout: 1})
		want := protocol.Counts{Admitted: 5, Successes: 2, Failures: 3, Errors: 2, Timeouts: 1}
		if got := recent(); got != want {
			t.Errorf("dashboard counts %+v, want the stream's rolling counts %+v", got, want)
		}
		if got := stream.connections(); len(got) != 1 || got[0] != "Bearer s3cret" {
			t.Errorf("stream requests carried Authorization %q, want one with the configured header", got)
		}
	})

	t.Run("an open circuit is open at the next read, by the library's rule", func(t *testing.T) {
		clk.Advance(time.Second)
		send(cmd{open: true, success: 5, failure: 12, timeout: 1, short: 4, semaphore: 1, pool: 2, bad: 1, fbSuccess: 3, fbFailed: 1})
		want := protocol.Counts{Admitted: 16, Successes: 2, Failures: 13, Errors: 12, Timeouts: 1, Ignored: 1,
			RejectedOpen: 4, RejectedBulkhead: 3, FallbackSuccess: 3, FallbackFailure: 1}
		d, _ := dependency(t, st, "orders", "GetOrder")
		if d.Recent != want {
			t.Errorf("dashboard counts %+v, want %+v", d.Recent, want)
		}
		if d.State != protocol.StateOpen {
			t.Errorf("state %q, want open", d.State)
		}
		trs, err := st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "orders", Breaker: "GetOrder", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 1 || trs[0].From != "closed" || trs[0].To != "open" || trs[0].Cause.Kind != protocol.CauseLibraryRule ||
			trs[0].Cause.Threshold != 50 || trs[0].Cause.WindowCalls != 25 || trs[0].OpenMillis != 5000 {
			t.Errorf("transitions %+v, want closed > open by library_rule at 50%% over 25 calls, open 5s", trs)
		}
	})

	t.Run("the breaker is marked sampled and cannot be held, on the page too", func(t *testing.T) {
		d, _ := dependency(t, st, "orders", "GetOrder")
		c := d.PerInstance[0].Config
		if !c.Sampled || !c.HoldsUnsupported || c.Library != source.LibraryHystrix || c.Settings.Map()["circuitBreakerErrorThresholdPercentage"] != "50" {
			t.Errorf("config %+v, want a sampled Hystrix stream breaker with its properties, holds unsupported", c)
		}
		why, no := cbdash.HoldsUnsupported(*c)
		if !no || !strings.Contains(why, "only reads") {
			t.Errorf("HoldsUnsupported = %q, %v; want the reason that cbdash only reads it", why, no)
		}
		page := get(t, st.URL()+"/dependency?service=orders&breaker=GetOrder")
		for _, want := range []string{`data-testid="instance-sampled"`, "half-open may show as open", "cbdash only reads this breaker (Hystrix stream)"} {
			if !strings.Contains(page, want) {
				t.Errorf("dependency page lacks %q", want)
			}
		}
	})

	t.Run("events that age out of the rolling window are not counted again", func(t *testing.T) {
		before := recent()
		clk.Advance(11 * time.Second)
		send(cmd{})
		if got := recent(); got != before {
			t.Errorf("after the rolling counts fell to 0, dashboard counts %+v, want them unchanged (%+v)", got, before)
		}
		d, _ := dependency(t, st, "orders", "GetOrder")
		if d.State != protocol.StateClosed {
			t.Errorf("state %q, want closed", d.State)
		}
		clk.Advance(time.Second)
		send(cmd{success: 2})
		before.Successes += 2
		before.Admitted += 2
		if got := recent(); got != before {
			t.Errorf("dashboard counts %+v, want %+v", got, before)
		}
	})

	t.Run("a silent stream makes the instance stale and is reconnected", func(t *testing.T) {
		eventually.True(t, "the instance stale", func() bool {
			clk.Advance(time.Second)
			d, _ := dependency(t, st, "orders", "GetOrder")
			return d.Stale == 1
		})
		eventually.True(t, "a second connection after the stream fell silent", func() bool {
			clk.Advance(time.Second)
			return len(stream.connections()) >= 2
		})
		send(cmd{success: 2})
		d, _ := dependency(t, st, "orders", "GetOrder")
		if d.Stale != 0 || d.State != protocol.StateClosed {
			t.Errorf("after a record on the new connection: stale %d, state %q; want live and closed", d.Stale, d.State)
		}
	})
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", u, resp.Status, b)
	}
	return string(b)
}

func TestNewRefusesBadTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    source.Target
		want string
	}{
		{"unknown kind", source.Target{Kind: "zipkin", URL: "http://a/", Service: "s"}, "targets[0].kind"},
		{"not http", source.Target{Kind: source.KindHystrix, URL: "ftp://a/", Service: "s"}, "targets[0].url"},
		{"no service", source.Target{Kind: source.KindPrometheus, URL: "http://a/metrics"}, "targets[0].service"},
		{"a zero width space in the service", source.Target{Kind: source.KindHystrix, URL: "http://a/", Service: "pay\u200bments"},
			"targets[0].service contains the invisible format character U+200B at byte 3"},
		{"a word joiner in the instance", source.Target{Kind: source.KindHystrix, URL: "http://a/", Service: "s", Instance: "\u2060i"},
			"targets[0].instance contains the invisible format character U+2060 at byte 0"},
		{"a BOM in a label value", source.Target{Kind: source.KindHystrix, URL: "http://a/", Service: "s", Labels: map[string]string{"az": "eu\ufeff"}},
			`targets[0].labels["az"] contains the invisible format character U+FEFF at byte 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := source.New(source.Config{Sink: nowhere{}, Targets: []source.Target{tc.t}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// nowhere is a sink that New accepts; these tests never get to use it.
type nowhere struct{}

func (nowhere) Ingest(context.Context, *protocol.Hello, *protocol.Batch) (protocol.IngestResponse, error) {
	return protocol.IngestResponse{}, nil
}

// turbineRecord is cmd c's record as Turbine merges it over hosts hosts,
// all alike but open: Turbine 1.x (v2 false) sums every integer, settings
// included, and writes the other values as strings, those the hosts
// disagree on as "{false:1,true:1}"; Turbine 2 sums counts but not
// settings, writes the values all hosts agree on as they are (a setting
// as a string: "50") and the others as {"false":1,"true":1}.
func turbineRecord(t *testing.T, c cmd, name string, hosts, open int, v2 bool) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(c.json(name)), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		f, isNum := v.(float64)
		switch {
		case k == "currentTime" && v2:
			delete(m, k)
		case isNum && strings.HasPrefix(k, "propertyValue_") && v2:
			m[k] = strconv.FormatFloat(f, 'f', -1, 64)
		case isNum:
			m[k] = f * float64(hosts)
		case k == "latencyExecute":
			for q, l := range v.(map[string]any) {
				v.(map[string]any)[q] = l.(float64) * float64(hosts)
			}
		case k == "isCircuitBreakerOpen":
			switch {
			case open > 0 && open < hosts && v2:
				m[k] = map[string]int{"false": hosts - open, "true": open}
			case open > 0 && open < hosts:
				m[k] = fmt.Sprintf("{false:%d,true:%d}", hosts-open, open)
			case v2:
				m[k] = open == hosts
			default:
				m[k] = strconv.FormatBool(open == hosts)
			}
		case !v2:
			if b, ok := v.(bool); ok {
				m[k] = strconv.FormatBool(b)
			}
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// A Turbine stream of two hosts, as Turbine 1.x and Turbine 2 write it:
// the dashboard shows one host's settings (threshold 50%, not the 100%
// Turbine 1.x sums), the cluster in its words ("open on 1 of 2 hosts",
// "cluster of 2 hosts, 1 open"), its counts marked estimated; a record
// whose isCircuitBreakerOpen cannot be read is refused, counted and
// logged.
func TestTurbineStreamIsACluster(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "Turbine 1.x", true: "Turbine 2"}[v2], func(t *testing.T) {
			clk := clocktest.Virtual()
			st := stacktest.Start(t, stacktest.Options{Clock: clk,
				Collector: func(c *collector.Config) { c.StaleAfter = time.Minute },
				Web:       func(c *web.Config) { c.Anonymous = true }})
			stream := newScriptedStream(t)
			reg := prometheus.NewRegistry()
			logs := &lines{}
			src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, Logger: slog.New(logs), Registerer: reg, Targets: []source.Target{{
				Kind: source.KindHystrix, URL: stream.URL + "/turbine.stream?cluster=orders", Service: "orders", Instance: "orders-cluster",
				Interval: source.Duration(time.Hour),
			}}})
			if err != nil {
				t.Fatal(err)
			}
			runSources(t, src)
			send := func(rec string) {
				t.Helper()
				s := src.Status()[0]
				stream.records <- rec
				eventually.True(t, "the record handled", func() bool {
					n := src.Status()[0]
					return n.Refused > s.Refused || n.Batches+n.Dropped > s.Batches+s.Dropped
				})
			}
			send(turbineRecord(t, cmd{success: 10}, "GetOrder", 2, 0, v2))
			clk.Advance(time.Second)
			send(turbineRecord(t, cmd{success: 10, failure: 12, short: 3, open: true}, "GetOrder", 2, 1, v2))

			d, ok := dependency(t, st, "orders", "GetOrder")
			if !ok {
				t.Fatal("orders/GetOrder is not on the dashboard")
			}
			c := d.PerInstance[0].Config
			if c.FailureRateThreshold != 50 || c.MinimumCalls != 20 || c.OpenDurationMillis != 5000 ||
				c.Settings.Map()["circuitBreakerErrorThresholdPercentage"] != "50" || !c.Estimated {
				t.Errorf("config %+v, want one host's settings (50%%, 20 calls, 5000 ms), estimated counts", c)
			}
			if d.State != protocol.StateOpen || d.PerInstance[0].Last.Hosts == nil || *d.PerInstance[0].Last.Hosts != (protocol.Hosts{Total: 2, Open: 1}) {
				t.Errorf("state %q, hosts %+v; want open on 1 of 2 hosts", d.State, d.PerInstance[0].Last.Hosts)
			}
			if h := d.PerInstance[0].Last.Headroom; h.FailureRateThreshold != 50 || h.MinimumCalls != 20 {
				t.Errorf("headroom %+v, want one host's threshold and volume", h)
			}
			page := get(t, st.URL()+"/dependency?service=orders&breaker=GetOrder")
			for _, want := range []string{"open on 1 of 2 hosts", "cluster of 2 hosts, 1 open", `data-testid="instance-estimated"`} {
				if !strings.Contains(page, want) {
					t.Errorf("the dependency page lacks %q", want)
				}
			}
			if overview := get(t, st.URL()+"/"); !strings.Contains(overview, "open on 1 of 2 hosts") {
				t.Errorf("the overview's tile lacks %q", "open on 1 of 2 hosts")
			}
			trs, err := st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "orders", Breaker: "GetOrder", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(trs) != 1 || trs[0].To != protocol.StateOpen || !strings.Contains(trs[0].Cause.Reason, "open on 1 of 2 hosts") {
				t.Errorf("transitions %+v, want one to open, on 1 of 2 hosts", trs)
			}

			// A record that cannot be read: refused, counted, logged.
			var bad map[string]any
			_ = json.Unmarshal([]byte(turbineRecord(t, cmd{success: 10}, "GetOrder", 2, 0, v2)), &bad)
			bad["isCircuitBreakerOpen"] = "{false:1,maybe:1}"
			b, _ := json.Marshal(bad)
			send(string(b))
			if got := refusedOf(t, reg, "orders-cluster")["malformed"]; got != 1 {
				t.Errorf("cbdash_source_records_refused_total{reason=malformed} = %v, want 1", got)
			}
			if msg := logs.attr("source: records refused", "err"); !strings.Contains(msg, "isCircuitBreakerOpen") {
				t.Errorf("the log's err %q does not name isCircuitBreakerOpen (%q)", msg, logs.all())
			}
		})
	}
}
