package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// lines is a slog.Handler that keeps the messages it is given.
type lines struct {
	mu   sync.Mutex
	msgs []string
	recs []slog.Record
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

func (l *lines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// attr returns the value of key in the last record with message msg.
func (l *lines) attr(msg, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.recs) - 1; i >= 0; i-- {
		if l.recs[i].Message != msg {
			continue
		}
		var v string
		l.recs[i].Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value.String()
				return false
			}
			return true
		})
		return v
	}
	return ""
}

// hostile returns the record of cmd c for name with field set to the raw
// JSON number v.
func hostile(t *testing.T, c cmd, name, field, v string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.json(name)), &m); err != nil {
		t.Fatal(err)
	}
	m[field] = json.RawMessage(v)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refused returns cbdash_source_records_refused_total by reason for the
// orders/orders-1 target.
func refused(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	return refusedOf(t, g, "orders-1")
}

// refusedOf returns cbdash_source_records_refused_total by reason for the
// orders/instance target.
func refusedOf(t *testing.T, g prometheus.Gatherer, instance string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "cbdash_source_records_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["service"] == "orders" && labels["instance"] == instance {
				out[labels["reason"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// A Hystrix stream with hostile records (1e308 and the like in numeric
// fields, a look-alike name, a field of the wrong type) between good ones:
// each hostile record is refused on its own and counted by reason, the
// good records (of the same command and of others) all reach the
// dashboard, and the log says so in a bounded number of lines.
func TestHystrixStreamRefusesHostileRecordsAlone(t *testing.T) {
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.StaleAfter = time.Minute },
		Web:       func(c *web.Config) { c.Anonymous = true }})
	stream := newScriptedStream(t)
	reg := prometheus.NewRegistry()
	logs := &lines{}
	src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, Logger: slog.New(logs), Registerer: reg, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: stream.URL + "/hystrix.stream", Service: "orders", Instance: "orders-1",
		Interval: source.Duration(time.Hour),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	runSources(t, src)

	good := func(t *testing.T, name string, c cmd) {
		t.Helper()
		s := src.Status()[0]
		stream.records <- c.json(name)
		eventually.True(t, "the good record of "+name+" read", func() bool {
			n := src.Status()[0]
			return n.Reads == s.Reads+1 && n.Batches+n.Dropped == s.Batches+s.Dropped+1
		})
		if n := src.Status()[0]; n.Dropped != s.Dropped {
			t.Fatalf("the collector did not take the batch of a good record of %s after a hostile one: %+v", name, n)
		}
	}
	bad := func(t *testing.T, rec string) {
		t.Helper()
		s := src.Status()[0]
		stream.records <- rec
		eventually.True(t, "the hostile record handled", func() bool {
			n := src.Status()[0]
			return n.Refused+n.Reads+n.Batches+n.Dropped > s.Refused+s.Reads+s.Batches+s.Dropped
		})
		if n := src.Status()[0]; n.Refused != s.Refused+1 || n.Reads != s.Reads || n.Batches != s.Batches || n.Dropped != s.Dropped {
			t.Errorf("a hostile record was read or sent, not refused: %+v, before %+v", n, s)
		}
	}

	hostiles := []struct {
		name, reason, rec string
	}{
		{"sleep window 1e308", "out_of_range", hostile(t, cmd{success: 1}, "GetOrder", "propertyValue_circuitBreakerSleepWindowInMilliseconds", "1e308")},
		{"rolling window 1e308", "out_of_range", hostile(t, cmd{success: 1}, "GetOrder", "propertyValue_metricsRollingStatisticalWindowInMilliseconds", "1e308")},
		{"timeout 1e308", "out_of_range", hostile(t, cmd{success: 1}, "GetOrder", "propertyValue_executionTimeoutInMilliseconds", "1e308")},
		{"success count 1e308", "out_of_range", hostile(t, cmd{}, "GetOrder", "rollingCountSuccess", "1e308")},
		{"latency mean 1e308", "out_of_range", hostile(t, cmd{success: 1}, "GetOrder", "latencyExecute_mean", "1e308")},
		{"a percentile of -1e308", "out_of_range", hostile(t, cmd{success: 1}, "GetOrder", "latencyExecute", `{"50": -1e308}`)},
		{"sleep window -1e308", "out_of_range", hostile(t, cmd{open: true}, "GetOrder", "propertyValue_circuitBreakerSleepWindowInMilliseconds", "-1e308")},
		{"a number beyond float64", "malformed", hostile(t, cmd{success: 1}, "GetOrder", "rollingCountFailure", "1e400")},
		{"a string for a count", "malformed", hostile(t, cmd{success: 1}, "GetOrder", "rollingCountFailure", `"many"`)},
		{"a new command with 1e308", "out_of_range", hostile(t, cmd{success: 1}, "Evil", "propertyValue_circuitBreakerSleepWindowInMilliseconds", "1e308")},
		{"a look-alike name", "invalid", cmd{success: 1}.json("Get\u200bOrder")},
		{"a latency sum past the protocol's", "invalid", hostile(t, cmd{success: 1_000_000_000}, "GetOrder", "latencyExecute_mean", "1e9")},
	}

	good(t, "GetOrder", cmd{success: 3})
	good(t, "ListOrders", cmd{success: 1})
	for i, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			clk.Advance(100 * time.Millisecond)
			bad(t, h.rec)
			clk.Advance(100 * time.Millisecond)
			good(t, "GetOrder", cmd{success: 3 + i + 1}) // one new call a record
			good(t, "ListOrders", cmd{success: 1, failure: i + 1})
			if got := refused(t, reg)[h.reason]; got == 0 {
				t.Errorf("cbdash_source_records_refused_total{reason=%q} = 0 after %s", h.reason, h.name)
			}
		})
	}

	d, ok := dependency(t, st, "orders", "GetOrder")
	if !ok {
		t.Fatal("orders/GetOrder is not on the dashboard")
	}
	// The first record (3 calls) is the baseline: the calls after it count.
	if want := (protocol.Counts{Admitted: int64(len(hostiles)), Successes: int64(len(hostiles))}); d.Recent != want {
		t.Errorf("GetOrder counts %+v, want every good record's calls %+v", d.Recent, want)
	}
	if d.PerInstance[0].Config.OpenDurationMillis != 5000 {
		t.Errorf("GetOrder's open duration %d ms, want the good records' 5000", d.PerInstance[0].Config.OpenDurationMillis)
	}
	l, ok := dependency(t, st, "orders", "ListOrders")
	if !ok || l.Recent.Errors != int64(len(hostiles)) {
		t.Errorf("ListOrders counts %+v, want %d errors", l.Recent, len(hostiles))
	}
	for _, name := range []string{"Evil", "Get\u200bOrder"} {
		if _, ok := dependency(t, st, "orders", name); ok {
			t.Errorf("%q, declared only by refused records, is on the dashboard", name)
		}
	}
	want := map[string]float64{}
	for _, h := range hostiles {
		want[h.reason]++
	}
	if got := refused(t, reg); len(got) != len(want) || got["out_of_range"] != want["out_of_range"] || got["malformed"] != want["malformed"] || got["invalid"] != want["invalid"] {
		t.Errorf("refused records by reason %v, want %v", got, want)
	}
	if s := src.Status()[0]; s.Refused != int64(len(hostiles)) || s.Dropped != 0 {
		t.Errorf("status %+v, want %d refused and no batch dropped", s, len(hostiles))
	}
	// The log: one line for the first refusal, then one a minute of the
	// clock at most, with the count since the line before.
	if n := len(logs.all()); n != 1 || logs.count("source: records refused") != 1 {
		t.Errorf("%d log lines for %d refused records within a minute, want the first refusal's only: %q", n, len(hostiles), logs.all())
	}
	clk.Advance(time.Minute)
	bad(t, hostiles[0].rec)
	if n := logs.count("source: records refused"); n != 2 {
		t.Errorf("%d lines of refused records, want 2 once a minute has passed: %q", n, logs.all())
	}
	if got, want := logs.attr("source: records refused", "refused"), fmt.Sprint(len(hostiles)); got != want {
		t.Errorf("the line after a minute says %s refused since the line before, want %s (%q)", got, want, logs.all())
	}
	if msg := logs.attr("source: records refused", "err"); !strings.Contains(msg, "propertyValue_circuitBreakerSleepWindowInMilliseconds") {
		t.Errorf("the line's err %q does not name the field", msg)
	}
}
