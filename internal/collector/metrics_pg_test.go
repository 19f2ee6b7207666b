package collector

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// scrapeMetrics GETs h's /metrics and parses it.
func scrapeMetrics(t *testing.T, h *harness) map[string]*dto.MetricFamily {
	t.Helper()
	_, body := call(t, "GET", h.srv.URL+"/metrics", "", nil)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestPerCollectorCountersSumToWhatTheAgentsSent: agents report through
// two collectors over one PostgreSQL database. Each collector's
// cbdash_breaker_calls_total and cbdash_breaker_latency_seconds count what
// its own agents sent, labelled collector="<its id>", so that their sum
// over collectors (sum without (collector)) is exactly what every agent
// sent; the live gauges (instances per state) are the fleet's on both.
func TestPerCollectorCountersSumToWhatTheAgentsSent(t *testing.T) {
	t.Parallel()
	skipWithoutPostgres(t)
	clk := clocktest.NewRunning()
	a, b := twoCollectorsOnClock(t, clk)
	type report struct{ admitted, failures int64 }
	sent := map[*harness]map[string][]report{
		a: {"a1": {{10, 2}, {5, 0}}},
		b: {"b1": {{7, 3}}, "b2": {{4, 4}}},
	}
	var success, errs, calls int64
	for h, insts := range sent {
		for inst, rs := range insts {
			ag := dialRaw(t, h, h.token)
			ag.hello(inst, 1)
			for i, r := range rs {
				bt := h.batch(uint64(i+1), r.admitted, r.failures)
				bt.Windows[0].Latency = make([]int64, protocol.NumLatencyBuckets)
				bt.Windows[0].Latency[0] = r.admitted
				ag.send(bt)
				ag.expect(protocol.TypeAck, nil)
				success, errs, calls = success+r.admitted-r.failures, errs+r.failures, calls+r.admitted
			}
		}
	}
	ids := map[*harness]string{a: "ca", b: "cb"}
	for h, id := range ids {
		if h.col.CollectorID() != id {
			t.Fatalf("collector id %q, want the node id %q", h.col.CollectorID(), id)
		}
	}
	var fams map[*harness]map[string]*dto.MetricFamily
	eventually.True(t, "both collectors show the fleet's three instances", func() bool {
		fams = map[*harness]map[string]*dto.MetricFamily{a: scrapeMetrics(t, a), b: scrapeMetrics(t, b)}
		for _, f := range fams {
			n := 0.0
			for _, m := range f["cbdash_breaker_instances"].GetMetric() {
				if labelOf(m, "breaker") == "db" && labelOf(m, "state") == protocol.StateClosed {
					n += m.GetGauge().GetValue()
				}
			}
			if n != 3 {
				return false
			}
		}
		return true
	})
	byOutcome := map[string]float64{}
	var latencyCount uint64
	for h, f := range fams {
		for _, m := range f["cbdash_breaker_calls_total"].GetMetric() {
			if got := labelOf(m, "collector"); got != ids[h] {
				t.Fatalf("a calls series of collector %s labelled collector=%q", ids[h], got)
			}
			byOutcome[labelOf(m, "outcome")] += m.GetCounter().GetValue()
		}
		for _, m := range f["cbdash_breaker_latency_seconds"].GetMetric() {
			if got := labelOf(m, "collector"); got != ids[h] {
				t.Fatalf("a latency series of collector %s labelled collector=%q", ids[h], got)
			}
			latencyCount += m.GetHistogram().GetSampleCount()
		}
	}
	if byOutcome["success"] != float64(success) || byOutcome["error"] != float64(errs) || latencyCount != uint64(calls) {
		t.Fatalf("summed over collectors: %v successes, %v errors, %d latencies; the agents sent %d, %d, %d",
			byOutcome["success"], byOutcome["error"], latencyCount, success, errs, calls)
	}
}
