package collector

import (
	"sync"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// The per-dependency figures beside the state and call counters of
// metrics.go: a latency histogram accumulated from the window reports,
// and, read from live state when gathered, the live instances per state
// and the number of dependencies open. /metrics and the OTLP export
// (internal/otelexport) both gather them from the collector's registry,
// so the two cannot disagree.

var instanceStates = []string{
	protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed,
}

// latencyHistograms is cbdash_breaker_latency_seconds: per dependency, the
// cumulative latency histogram of the calls its instances reported, with
// the protocol's buckets (protocol.LatencyBoundsMillis) in seconds.
type latencyHistograms struct {
	desc   *prometheus.Desc
	bounds []float64 // seconds

	mu   sync.Mutex
	deps map[cbdash.DependencyKey]*latencyHist
}

type latencyHist struct {
	buckets []uint64 // per bucket, not cumulative; the last is the overflow
	sumMs   float64
}

func newLatencyHistograms() *latencyHistograms {
	bounds := make([]float64, len(protocol.LatencyBoundsMillis))
	for i, ms := range protocol.LatencyBoundsMillis {
		bounds[i] = ms / 1000
	}
	return &latencyHistograms{
		desc: prometheus.NewDesc("cbdash_breaker_latency_seconds",
			"Latency of the calls the agents connected to this collector (label collector) reported, summed over instances (the protocol's buckets); sum without (collector) for the fleet.",
			[]string{"service", "breaker"}, nil),
		bounds: bounds,
		deps:   make(map[cbdash.DependencyKey]*latencyHist),
	}
}

// add adds a window report's latency histogram (a delta) to k's.
func (h *latencyHistograms) add(k cbdash.DependencyKey, w *protocol.Window) {
	if h == nil || len(w.Latency) != protocol.NumLatencyBuckets {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.deps[k]
	if d == nil {
		d = &latencyHist{buckets: make([]uint64, protocol.NumLatencyBuckets)}
		h.deps[k] = d
	}
	for i, n := range w.Latency {
		if n > 0 {
			d.buckets[i] += uint64(n)
		}
	}
	d.sumMs += w.LatencySumMs
}

func (h *latencyHistograms) forget(k cbdash.DependencyKey) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.deps, k)
	h.mu.Unlock()
}

func (h *latencyHistograms) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

func (h *latencyHistograms) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, d := range h.deps {
		cum := make(map[float64]uint64, len(h.bounds))
		var n uint64
		for i, b := range h.bounds {
			n += d.buckets[i]
			cum[b] = n
		}
		n += d.buckets[len(h.bounds)]
		ch <- prometheus.MustNewConstHistogram(h.desc, n, d.sumMs/1000, cum, k.Service, k.Breaker)
	}
}

// liveGauges reads live state when gathered: cbdash_breaker_instances
// (live instances of a dependency per state, every state present so the
// series are stable) and cbdash_dependencies_open (dependencies whose
// worst state is open).
type liveGauges struct {
	live      *live.State
	instances *prometheus.Desc
	open      *prometheus.Desc
}

func newLiveGauges(l *live.State) *liveGauges {
	return &liveGauges{
		live: l,
		instances: prometheus.NewDesc("cbdash_breaker_instances",
			"Live (not stale) instances of a breaker per state.", []string{"service", "breaker", "state"}, nil),
		open: prometheus.NewDesc("cbdash_dependencies_open",
			"Dependencies whose worst state over live instances is open.", nil, nil),
	}
}

func (g *liveGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.instances
	ch <- g.open
}

func (g *liveGauges) Collect(ch chan<- prometheus.Metric) {
	open := 0
	// The views themselves, read-only: a copy of every instance line of
	// every dependency per scrape cost more than the rest of the scrape.
	deps := g.live.Snapshot()
	for _, d := range deps {
		if d.State == protocol.StateOpen {
			open++
		}
		for _, s := range instanceStates {
			ch <- prometheus.MustNewConstMetric(g.instances, prometheus.GaugeValue, float64(d.ByState[s]), d.Service, d.Breaker, s)
		}
	}
	ch <- prometheus.MustNewConstMetric(g.open, prometheus.GaugeValue, float64(open))
}
