package otelexport_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/otelexport"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// receiver is an OTLP/HTTP metrics receiver on loopback: it decodes each
// request body as the protobuf ExportMetricsServiceRequest it must be.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*colpb.ExportMetricsServiceRequest
	hdr []http.Header
	bad []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var m colpb.ExportMetricsServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &m)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || req.URL.Path != "/v1/metrics" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.bad = append(r.bad, req.URL.Path+" "+req.Header.Get("Content-Type")+" "+errString(err))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.got = append(r.got, &m)
		r.hdr = append(r.hdr, req.Header.Clone())
		out, _ := proto.Marshal(&colpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (r *receiver) last(t *testing.T) (*colpb.ExportMetricsServiceRequest, http.Header) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("the receiver refused %q", r.bad)
	}
	if len(r.got) == 0 {
		t.Fatal("nothing was exported")
	}
	return r.got[len(r.got)-1], r.hdr[len(r.hdr)-1]
}

// TestExportCarriesWhatMetricsServes: a real agent's breaker makes calls
// (some slow, some failing, the breaker trips, calls are rejected); the
// collector ingests them; an export to a real OTLP/HTTP receiver then
// carries, for every per-dependency series of /metrics, the value that
// /metrics serves.
func TestExportCarriesWhatMetricsServes(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{Collector: func(c *collector.Config) { c.Registerer, c.CollectorID = reg, "collector-1" }})
	clk := breakertest.NewClock(s.Clock.Now())
	br, err := breaker.New("db", breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{URL: s.AgentURL(), Token: s.AgentToken, Service: "api", Instance: "a1",
		ReportInterval: 20 * time.Millisecond, Clock: s.Clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Register(br); err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for i := range 13 { // 5 successes of 30 ms, 5 failures of 300 ms (the breaker trips), 3 rejected
		_ = br.Execute(context.Background(), func(context.Context) error {
			if i < 5 {
				clk.Advance(30 * time.Millisecond)
				return nil
			}
			clk.Advance(300 * time.Millisecond)
			return boom
		})
	}
	eventually.True(t, "the calls in /metrics", func() bool {
		fams := scrape(t, s.URL())
		return value(fams, "cbdash_breaker_calls_total", "outcome", "rejected_open") == 3 &&
			fams["cbdash_breaker_latency_seconds"] != nil && fams["cbdash_breaker_latency_seconds"].Metric[0].Histogram.GetSampleCount() == 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ag.Close(ctx); err != nil {
		t.Fatal(err)
	}

	r := newReceiver(t)
	exp, err := otelexport.New(ctx, otelexport.Config{Endpoint: r.srv.URL, Interval: time.Hour, Gatherer: reg,
		CollectorID: "collector-1", Headers: map[string]string{"X-Api-Key": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	if err := exp.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	fams := scrape(t, s.URL())
	req, hdr := r.last(t)
	if hdr.Get("X-Api-Key") != "k1" {
		t.Errorf("header X-Api-Key %q, want k1", hdr.Get("X-Api-Key"))
	}
	if len(req.ResourceMetrics) != 1 {
		t.Fatalf("%d resource metrics, want 1", len(req.ResourceMetrics))
	}
	rm := req.ResourceMetrics[0]
	attrs := attrMap(rm.Resource.Attributes)
	if attrs["service.name"] != "cbdash" || attrs["service.instance.id"] != "collector-1" || attrs["cbdash.collector.id"] != "collector-1" {
		t.Errorf("resource attributes %v", attrs)
	}
	otlp := map[string]*metricpb.Metric{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			otlp[m.Name] = m
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if otlp[name] != nil {
			t.Errorf("%s exported: only cbdash_* families are", name)
		}
	}
	compared := 0
	for _, name := range []string{
		"cbdash_breaker_state", "cbdash_breaker_calls_total", "cbdash_breaker_latency_seconds",
		"cbdash_breaker_instances", "cbdash_dependencies_open",
	} {
		f := fams[name]
		m := otlp[name]
		if f == nil || m == nil {
			t.Errorf("%s: in /metrics %v, exported %v", name, f != nil, m != nil)
			continue
		}
		for _, pm := range f.Metric {
			key := labelKey(pm.Label)
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				dp := findNumber(m.GetGauge().GetDataPoints(), key)
				if dp == nil || dp.GetAsDouble() != pm.Gauge.GetValue() {
					t.Errorf("%s{%s}: /metrics %v, OTLP %v", name, key, pm.Gauge.GetValue(), dp)
				}
			case dto.MetricType_COUNTER:
				sum := m.GetSum()
				dp := findNumber(sum.GetDataPoints(), key)
				if dp == nil || dp.GetAsDouble() != pm.Counter.GetValue() || !sum.IsMonotonic ||
					sum.AggregationTemporality != metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
					t.Errorf("%s{%s}: /metrics %v, OTLP %v (sum %v)", name, key, pm.Counter.GetValue(), dp, sum)
				}
			case dto.MetricType_HISTOGRAM:
				var dp *metricpb.HistogramDataPoint
				for _, d := range m.GetHistogram().GetDataPoints() {
					if attrKey(d.Attributes) == key {
						dp = d
					}
				}
				h := pm.Histogram
				finite := slices.DeleteFunc(slices.Clone(h.Bucket), func(b *dto.Bucket) bool { return math.IsInf(b.GetUpperBound(), 1) })
				if dp == nil || dp.Count != h.GetSampleCount() || dp.GetSum() != h.GetSampleSum() || len(dp.ExplicitBounds) != len(finite) {
					t.Fatalf("%s{%s}: /metrics %v, OTLP %v", name, key, h, dp)
				}
				var cum uint64
				for i, b := range finite {
					cum += dp.BucketCounts[i]
					if dp.ExplicitBounds[i] != b.GetUpperBound() || cum != b.GetCumulativeCount() {
						t.Errorf("%s{%s} bucket %v: /metrics %d, OTLP %d", name, key, b.GetUpperBound(), b.GetCumulativeCount(), cum)
					}
				}
			}
			compared++
		}
	}
	// The figures themselves, so that "equal" is not "equally empty".
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"cbdash_breaker_calls_total", "outcome", "success", 5},
		{"cbdash_breaker_calls_total", "outcome", "error", 5},
		{"cbdash_breaker_calls_total", "outcome", "rejected_open", 3},
		{"cbdash_breaker_state", "state", "open", 1},
		{"cbdash_breaker_instances", "state", "open", 1},
		{"cbdash_dependencies_open", "", "", 1},
	} {
		if got := value(fams, c.name, c.label, c.value); got != c.want {
			t.Errorf("/metrics %s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	t.Logf("%d series compared", compared)
	// The counters of what this collector ingested carry its name, the
	// resource's service.instance.id, as an attribute (sum over it for the
	// fleet); the fleet-wide gauges do not.
	for _, dp := range otlp["cbdash_breaker_calls_total"].GetSum().GetDataPoints() {
		if a := attrMap(dp.Attributes); a["collector"] != "collector-1" {
			t.Errorf("calls data point attributes %v, want collector=collector-1", a)
		}
	}
	for _, dp := range otlp["cbdash_breaker_latency_seconds"].GetHistogram().GetDataPoints() {
		if a := attrMap(dp.Attributes); a["collector"] != "collector-1" {
			t.Errorf("latency data point attributes %v, want collector=collector-1", a)
		}
	}
	for _, dp := range otlp["cbdash_breaker_instances"].GetGauge().GetDataPoints() {
		if a := attrMap(dp.Attributes); a["collector"] != "" {
			t.Errorf("instances data point attributes %v: the fleet's gauges name no collector", a)
		}
	}
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the series of family name whose label has value
// (any series when label is ""); -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name, label, v string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if label != "" && (l.GetName() != label || l.GetValue() != v) {
				continue
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		if label == "" {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return -1
}

func labelKey(ls []*dto.LabelPair) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func attrKey(as []*commonpb.KeyValue) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, a.Key+"="+a.Value.GetStringValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func attrMap(as []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, a := range as {
		out[a.Key] = a.Value.GetStringValue()
	}
	return out
}

func findNumber(dps []*metricpb.NumberDataPoint, key string) *metricpb.NumberDataPoint {
	for _, d := range dps {
		if attrKey(d.Attributes) == key {
			return d
		}
	}
	return nil
}

func TestConfigIsValidated(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range []struct {
		name, field string
		cfg         otelexport.Config
	}{
		{"no endpoint", "Endpoint", otelexport.Config{Gatherer: reg}},
		{"grpc endpoint", "Endpoint", otelexport.Config{Endpoint: "grpc://h:4317", Gatherer: reg}},
		{"no gatherer", "Gatherer", otelexport.Config{Endpoint: "http://h:4318"}},
		{"negative interval", "Interval", otelexport.Config{Endpoint: "http://h:4318", Gatherer: reg, Interval: -time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := otelexport.New(context.Background(), c.cfg)
			if !errors.Is(err, otelexport.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err %v, want ErrInvalid naming %s", err, c.field)
			}
		})
	}
}
