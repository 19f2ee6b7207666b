package source

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestHistogramFromQuantiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int64
		qs     []quantile
		mean   float64
		bucket map[int]int64 // expected counts of some buckets
	}{
		{"all calls at the mean without quantiles", 9, nil, 30, map[int]int64{5: 9}},
		{"one latency for every quantile", 4, []quantile{{0, 3}, {0.5, 3}, {1, 3}}, 3, map[int]int64{2: 4}},
		{"halves on either side of the median", 100, []quantile{{0, 0}, {0.5, 10}, {1, 1000}}, 0, map[int]int64{0: 5, 1: 5, 2: 15, 3: 25}},
		{"calls above the last quantile at its latency", 10, []quantile{{0.9, 20000}}, 0, map[int]int64{13: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := histogram(tc.n, tc.qs, tc.mean)
			var sum int64
			for _, v := range h {
				sum += v
			}
			if len(h) != protocol.NumLatencyBuckets || sum != tc.n {
				t.Fatalf("histogram %v: %d buckets adding up to %d, want %d adding up to %d", h, len(h), sum, protocol.NumLatencyBuckets, tc.n)
			}
			for b, want := range tc.bucket {
				if h[b] != want {
					t.Errorf("bucket %d (<= %v ms) has %d, want %d (%v)", b, protocol.LatencyBoundsMillis[min(b, 12)], h[b], want, h)
				}
			}
		})
	}
	if h := histogram(0, nil, 5); h != nil {
		t.Errorf("no calls: %v, want nil", h)
	}
}

// A resilience4j timer with percentile histograms on is a Prometheus
// histogram: its buckets' increases place the calls.
func TestResilience4jHistogramTimer(t *testing.T) {
	scrape := func(fast, slow int) map[string]*promSnap {
		t.Helper()
		text := `# TYPE resilience4j_circuitbreaker_calls_seconds histogram
resilience4j_circuitbreaker_calls_seconds_bucket{kind="successful",name="b",le="0.01",} ` + itoa(fast) + `
resilience4j_circuitbreaker_calls_seconds_bucket{kind="successful",name="b",le="0.5",} ` + itoa(fast+slow) + `
resilience4j_circuitbreaker_calls_seconds_bucket{kind="successful",name="b",le="+Inf",} ` + itoa(fast+slow) + `
resilience4j_circuitbreaker_calls_seconds_count{kind="successful",name="b",} ` + itoa(fast+slow) + `
resilience4j_circuitbreaker_calls_seconds_sum{kind="successful",name="b",} 1.0
`
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return promSnaps(fams)
	}
	var b promBreaker
	now := clocktest.Epoch()
	b.read("b", scrape(10, 0)["b"], now, 5*time.Second)
	w, _ := b.read("b", scrape(14, 6)["b"], now.Add(5*time.Second), 5*time.Second)
	if w.Counts.Successes != 10 {
		t.Fatalf("counts %+v, want 10 successes", w.Counts)
	}
	var fast, slow int64
	for i, n := range w.Latency {
		if i <= 3 {
			fast += n
		} else if i <= 8 {
			slow += n
		}
	}
	if fast != 4 || slow != 6 {
		t.Errorf("latency %v: %d calls <= 10 ms and %d in 10..500 ms, want 4 and 6", w.Latency, fast, slow)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
