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
