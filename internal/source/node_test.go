package source_test

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// nodeDir holds the Node service (service.js) and its locked npm
// dependencies: opossum, opossum-hystrix, opossum-prometheus.
const nodeDir = "testdata/node"

// nodeService runs testdata/node/service.js and returns its base URL and
// a function that stops it (also run when the test ends). Without node or
// its node_modules (npm ci in testdata/node; .ci/run does it) the test is
// skipped, except in CI (CI set), where it fails.
func nodeService(t *testing.T) (base string, stop func()) {
	t.Helper()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	default:
		if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "opossum-prometheus")); err != nil {
			missing = "its npm packages are not installed (run `npm ci` in internal/source/testdata/node)"
		}
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the Node opossum service cannot run in CI: %s", missing)
		}
		t.Skipf("skipping the Node opossum service test: %s", missing)
	}
	cmd := exec.Command(node, "service.js")
	cmd.Dir = nodeDir
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("node service.js printed no port: %v", err)
	}
	var hello struct{ Port int }
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Port == 0 {
		t.Fatalf("node service.js printed %q, want {\"port\": N}", line)
	}
	return "http://127.0.0.1:" + strconv.Itoa(hello.Port), stop
}

// call fires a breaker of the Node service once; it returns the outcome
// and whether the breaker is open after it.
func call(t *testing.T, base, breaker, outcome string) (string, bool) {
	t.Helper()
	resp, err := http.Get(base + "/call?breaker=" + breaker + "&outcome=" + outcome)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Outcome string
		Opened  bool
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Outcome, r.Opened
}

// streamRecord reads the Node service's Hystrix stream, as any dashboard
// would, until a record of breaker satisfies ok, and returns it.
func streamRecord(t *testing.T, base, breaker string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/hystrix.stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, found := strings.CutPrefix(sc.Text(), "data: ")
		if !found {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(data), &rec) == nil && rec["name"] == breaker && ok(rec) {
			return rec
		}
	}
	t.Fatalf("no record of %s as wanted in the stream within %v (%v)", breaker, eventually.Timeout, sc.Err())
	return nil
}

func num(rec map[string]any, field string) int64 {
	f, _ := rec[field].(float64)
	return int64(f)
}

// TestNodeOpossum points cbdash at a real Node service's opossum breakers,
// through both of their published forms: opossum-hystrix's stream and
// opossum-prometheus's metrics.
func TestNodeOpossum(t *testing.T) {
	base, stop := nodeService(t)
	st := stacktest.Start(t, stacktest.Options{Clock: clocktest.NewRunning(),
		Collector: func(c *collector.Config) { c.StaleAfter = 3 * time.Second }})
	src, err := source.New(source.Config{Sink: st.Collector, Clock: st.Clock, MaxBackoff: time.Second, Targets: []source.Target{
		{Kind: source.KindHystrix, URL: base + "/hystrix.stream", Service: "shop", Instance: "shop-1", Interval: source.Duration(3 * time.Second)},
		{Kind: source.KindPrometheus, URL: base + "/metrics", Service: "shop-metrics", Instance: "shop-1", Interval: source.Duration(500 * time.Millisecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runSources(t, src)
	// The first record of each breaker and the first scrape are the
	// baselines: the script's calls come after them.
	eventually.True(t, "both breakers' first records read and the metrics scraped", func() bool {
		s := src.Status()
		return s[0].Reads >= 2 && s[1].Reads > 0
	})

	// The script: inventory succeeds 4 times, then fails until it opens,
	// then rejects 3 calls; pricing succeeds 3 times.
	var failures int64
	for range 4 {
		call(t, base, "inventory", "ok")
	}
	for opened := false; !opened; {
		if failures++; failures > 20 {
			t.Fatal("inventory did not open after 20 failures")
		}
		_, opened = call(t, base, "inventory", "fail")
	}
	openedReads := src.Status()[0].Reads
	for range 3 {
		if o, _ := call(t, base, "inventory", "ok"); o != "reject" {
			t.Fatalf("a call to the open inventory breaker: %s, want reject", o)
		}
	}
	for range 3 {
		call(t, base, "pricing", "ok")
	}

	t.Run("hystrix stream: an open circuit is open within two stream intervals", func(t *testing.T) {
		eventually.True(t, "shop/inventory open on the dashboard", func() bool {
			d, ok := dependency(t, st, "shop", "inventory")
			return ok && d.State == protocol.StateOpen
		})
		// Two breakers: each interval brings two records.
		if n := src.Status()[0].Reads - openedReads; n > 2*2 {
			t.Errorf("open on the dashboard after %d records (%d intervals) since the circuit opened, want at most two intervals", n, n/2)
		}
	})

	t.Run("hystrix stream: the dashboard's counts are the stream's rolling counts", func(t *testing.T) {
		rec := streamRecord(t, base, "inventory", func(r map[string]any) bool { return num(r, "rollingCountShortCircuited") == 3 })
		if num(rec, "rollingCountSuccess") != 4 || num(rec, "rollingCountFailure") != failures {
			t.Fatalf("the stream reported %d successes, %d failures; the script made 4 and %d", num(rec, "rollingCountSuccess"), num(rec, "rollingCountFailure"), failures)
		}
		// opossum-hystrix reports every failure as a bad request too;
		// cbdash maps bad requests to ignored, as Hystrix means them.
		want := protocol.Counts{Successes: 4, Errors: failures, Failures: failures, RejectedOpen: 3,
			Ignored: num(rec, "rollingCountBadRequests"), Timeouts: num(rec, "rollingCountTimeout")}
		want.Admitted = want.Successes + want.Failures + want.Ignored
		eventually.True(t, "the dashboard's counts equal the stream's", func() bool {
			d, _ := dependency(t, st, "shop", "inventory")
			return d.Recent == want
		})
		eventually.True(t, "shop/pricing with 3 successes", func() bool {
			d, ok := dependency(t, st, "shop", "pricing")
			return ok && d.Recent.Successes == 3 && d.State == protocol.StateClosed
		})
	})

	t.Run("prometheus metrics: state, counts and rates of opossum-prometheus", func(t *testing.T) {
		want := protocol.Counts{Admitted: 4 + failures, Successes: 4, Errors: failures, Failures: failures, RejectedOpen: 3}
		eventually.True(t, "shop-metrics/inventory open with the script's counts", func() bool {
			d, ok := dependency(t, st, "shop-metrics", "inventory")
			return ok && d.State == protocol.StateOpen && d.Recent == want
		})
		d, _ := dependency(t, st, "shop-metrics", "inventory")
		if rate := 100 * float64(failures) / float64(4+failures); math.Abs(d.FailureRate-rate) > 0.01 {
			t.Errorf("failure rate %v, want %v", d.FailureRate, rate)
		}
		if c := d.PerInstance[0].Config; c.Library != source.LibraryOpossum || !c.Sampled || !c.HoldsUnsupported {
			t.Errorf("config %+v, want a sampled opossum breaker that cannot be held", c)
		}
		trs, err := st.Store.Transitions(context.Background(), cbdashQuery("shop-metrics", "inventory"))
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 1 || trs[0].From != "closed" || trs[0].To != "open" {
			t.Errorf("transitions %+v, want closed > open", trs)
		}
		eventually.True(t, "shop-metrics/pricing closed with 3 successes", func() bool {
			d, ok := dependency(t, st, "shop-metrics", "pricing")
			return ok && d.State == protocol.StateClosed && d.Recent.Successes == 3
		})
	})

	t.Run("a stopped service makes both instances stale", func(t *testing.T) {
		stop()
		eventually.True(t, "shop/inventory and shop-metrics/inventory stale", func() bool {
			a, _ := dependency(t, st, "shop", "inventory")
			b, _ := dependency(t, st, "shop-metrics", "inventory")
			return a.Stale == 1 && b.Stale == 1
		})
		if s := src.Status(); s[0].Connected || s[1].Connected {
			t.Errorf("status %+v, want both disconnected", s)
		}
	})
}

func cbdashQuery(service, breaker string) cbdash.TransitionQuery {
	return cbdash.TransitionQuery{Service: service, Breaker: breaker, Limit: 10}
}

// countingSink keeps the windows a source sends, by breaker.
type countingSink struct {
	mu      sync.Mutex
	windows map[string][]protocol.Window
}

func (s *countingSink) Ingest(_ context.Context, _ *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.windows == nil {
		s.windows = map[string][]protocol.Window{}
	}
	for _, w := range b.Windows {
		s.windows[w.Breaker] = append(s.windows[w.Breaker], w)
	}
	return protocol.IngestResponse{}, nil
}

func (s *countingSink) of(breaker string) []protocol.Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.Window(nil), s.windows[breaker]...)
}

// A real Node opossum breaker's calls read from opossum-hystrix's stream,
// in real time, so shorter than the 5 minutes of hystrix-go's test
// (internal/source/e2e): 30 s of steady calls (20 a second, one in ten
// failing), then 15 s of bursts of 30 calls. opossum-hystrix's record is
// opossum's snapshot, taken just after its buckets rotate, so each read's
// calls are known exactly: the counts add up to what opossum answered the
// calls (success or failure) within 1%, and no steady read shows more
// than twice the rate.
func TestNodeOpossumHystrixCountsAddUp(t *testing.T) {
	base, _ := nodeService(t)
	sink := &countingSink{}
	src, err := source.New(source.Config{Sink: sink, Targets: []source.Target{
		{Kind: source.KindHystrix, URL: base + "/hystrix.stream", Service: "shop", Instance: "shop-1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runSources(t, src)
	eventually.True(t, "the stream connected and a record of pricing read", func() bool {
		return len(sink.of("pricing")) > 0
	})

	var mu sync.Mutex
	made := map[string]int64{}
	var wg sync.WaitGroup
	fire := func(i int) {
		wg.Go(func() {
			outcome := "ok"
			if i%10 == 9 {
				outcome = "fail"
			}
			o, _ := call(t, base, "pricing", outcome)
			mu.Lock()
			made[o]++
			mu.Unlock()
		})
	}
	steadyFrom := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	i := 0
	for range tick.C {
		if time.Since(steadyFrom) >= 30*time.Second {
			break
		}
		fire(i)
		i++
	}
	steadyTo := time.Now()
	tick.Reset(3 * time.Second)
	for range 5 {
		<-tick.C
		for range 30 {
			fire(i)
			i++
		}
	}
	tick.Stop()
	wg.Wait()
	var got protocol.Counts
	eventually.True(t, "every call read", func() bool {
		got = sumWindows(sink.of("pricing"))
		return got.Successes+got.Errors >= made["success"]+made["failure"]
	})
	// Any read after the last call's: nothing more comes.
	reads := len(sink.of("pricing"))
	eventually.True(t, "two more reads", func() bool { return len(sink.of("pricing")) >= reads+2 })
	got = sumWindows(sink.of("pricing"))
	t.Logf("opossum answered %v; the stream's counts: %d successes, %d failures", made, got.Successes, got.Errors)
	for _, c := range []struct {
		name      string
		got, made int64
	}{{"successes", got.Successes, made["success"]}, {"failures", got.Errors, made["failure"]}} {
		if math.Abs(float64(c.got-c.made)) > max(0.01*float64(c.made), 1) {
			t.Errorf("%s: %d read from the stream, opossum answered %d", c.name, c.got, c.made)
		}
	}
	for _, w := range sink.of("pricing") {
		at := time.UnixMilli(w.Start)
		if at.Before(steadyFrom.Add(time.Second)) || at.After(steadyTo.Add(-2*time.Second)) {
			continue
		}
		if rate := float64(w.Counts.Successes+w.Counts.Errors) / (float64(w.Millis) / 1000); rate > 40 {
			t.Errorf("a read of steady calls (20 a second) showed %.0f a second", rate)
		}
	}
}

func sumWindows(ws []protocol.Window) (c protocol.Counts) {
	for _, w := range ws {
		c.Add(w.Counts)
	}
	return c
}
