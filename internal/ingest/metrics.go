package ingest

import (
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the pipeline's Prometheus series.
type metrics struct {
	batches     *prometheus.CounterVec
	windows     prometheus.Counter
	transitions prometheus.Counter
	lag         prometheus.Histogram
	commit      prometheus.Histogram
	queue       prometheus.Gauge
	connections prometheus.Gauge
	agentDrops  *prometheus.CounterVec
	distrust    *prometheus.CounterVec // see trust.go
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_collector_batches_total",
			Help: "Batches received from agents by result: stored, duplicate, refused, failed (store error).",
		}, []string{"result"}),
		windows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbdash_collector_window_reports_total",
			Help: "Window reports stored (the ingest rate).",
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbdash_collector_transitions_total",
			Help: "Transitions stored.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cbdash_collector_ingest_lag_seconds",
			Help:    "From a batch's sent_at (agent clock) to its commit.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60},
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cbdash_collector_store_seconds",
			Help:    "Time SaveBatch took (queueing plus group commit).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cbdash_collector_store_queue_depth",
			Help: "Batches validated and waiting to be committed.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cbdash_collector_agent_connections",
			Help: "Connected agent websockets.",
		}),
		agentDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_collector_agent_drops_total",
			Help: "Data agents reported dropping under memory pressure, by kind (windows, merged, batches, transitions, command_results, and calls: the calls the dropped windows counted).",
		}, []string{"kind"}),
		distrust: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_collector_agent_refused_total",
			Help: "What agents sent that the collector refused or did not trust, by reason (" + distrustReasons + ").",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{
		m.batches, m.windows, m.transitions, m.lag, m.commit, m.queue, m.connections, m.agentDrops, m.distrust,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) agentDropped(d *protocol.Dropped) {
	if m == nil || d == nil {
		return
	}
	for _, f := range []struct {
		kind string
		n    int64
	}{{"windows", d.Windows}, {"merged", d.Merged}, {"batches", d.Batches}, {"transitions", d.Transitions}, {"command_results", d.CommandResults}, {"calls", d.Calls}} {
		if f.n > 0 {
			m.agentDrops.WithLabelValues(f.kind).Add(float64(f.n))
		}
	}
}

// QueueDepth is cbdash_collector_store_queue_depth: the batches validated
// and not yet committed (or failed).
func (c *Pipeline) QueueDepth() float64 {
	var m dto.Metric
	if c.metrics.queue.Write(&m) != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}
