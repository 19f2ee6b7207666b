package collector

import (
	"github.com/cbdash/cbdash/internal/store"
	"sync"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome label values of cbdash_breaker_calls_total, in the order of
// outcomeCounts.
var outcomes = []string{
	"success", "error", "timeout", "panic", "ignored", "slow",
	"rejected_open", "rejected_half_open_full", "rejected_forced_open", "rejected_bulkhead",
	"fallback_success", "fallback_failure",
}

func outcomeCounts(c *protocol.Counts) [12]int64 {
	return [12]int64{
		c.Successes, c.Errors, c.Timeouts, c.Panics, c.Ignored, c.Slow,
		c.RejectedOpen, c.RejectedHalfOpen, c.RejectedForced, c.RejectedBulkhead,
		c.FallbackSuccess, c.FallbackFailure,
	}
}

// metrics are the collector's Prometheus series of live state (it is
// live state's live.Metrics); the ingest pipeline's are its own
// (internal/ingest). A nil *metrics does nothing.
type metrics struct {
	state       *prometheus.GaugeVec
	calls       *prometheus.CounterVec
	subscribers prometheus.Gauge
	subDrops    prometheus.Counter
	latency     *latencyHistograms // see metrics_fleet.go

	mu         sync.Mutex
	stateLabel map[cbdash.DependencyKey]string
	callsByDep map[cbdash.DependencyKey][]prometheus.Counter
}

// newMetrics registers the series of live state with reg. The counters of
// what this collector ingested (calls by outcome, the latency histogram)
// carry the label collector=id: with several collectors each counts its
// own agents' reports, and sum without (collector) is the fleet's. The
// state and instance gauges are the fleet's live view, the same on every
// collector, and carry no such label.
func newMetrics(reg prometheus.Registerer, id string) (*metrics, error) {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cbdash_breaker_state",
			Help: "Worst state over the live instances of a breaker (1 for the current state label; one series per breaker, \"stale\" when no instance is live).",
		}, []string{"service", "breaker", "state"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_breaker_calls_total",
			Help: "Calls reported by the agents connected to this collector (label collector), summed over instances, by outcome (slow and fallback_* overlap the others); sum without (collector) for the fleet.",
		}, []string{"service", "breaker", "outcome"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cbdash_collector_subscribers",
			Help: "Live event subscribers (dashboards).",
		}),
		subDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbdash_collector_subscriber_drops_total",
			Help: "Subscribers dropped because they fell behind.",
		}),
		latency:    newLatencyHistograms(),
		stateLabel: make(map[cbdash.DependencyKey]string),
		callsByDep: make(map[cbdash.DependencyKey][]prometheus.Counter),
	}
	for _, c := range []prometheus.Collector{m.state, m.subscribers, m.subDrops} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	own := prometheus.WrapRegistererWith(prometheus.Labels{"collector": id}, reg)
	for _, c := range []prometheus.Collector{m.calls, m.latency} {
		if err := own.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// SetState rewrites the breaker's single state series when its state
// changed, deleting the old label value so no stale series is left.
func (m *metrics) SetState(k cbdash.DependencyKey, v *cbdash.Dependency) {
	if m == nil {
		return
	}
	s := v.State
	if s == "" {
		s = "stale"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.stateLabel[k]
	if ok && old == s {
		return
	}
	if ok {
		m.state.DeleteLabelValues(k.Service, k.Breaker, old)
	}
	m.stateLabel[k] = s
	m.state.WithLabelValues(k.Service, k.Breaker, s).Set(1)
}

// AddWindow adds a window report's counts to the breaker's call counters
// and its latency histogram to the breaker's.
func (m *metrics) AddWindow(k cbdash.DependencyKey, w *protocol.Window) {
	if m == nil {
		return
	}
	m.latency.add(k, w)
	m.addCalls(k, &w.Counts)
}

// addCalls adds counts to the breaker's call counters.
func (m *metrics) addCalls(k cbdash.DependencyKey, c *protocol.Counts) {
	m.mu.Lock()
	cs := m.callsByDep[k]
	if cs == nil {
		cs = make([]prometheus.Counter, len(outcomes))
		for i, o := range outcomes {
			cs[i] = m.calls.WithLabelValues(k.Service, k.Breaker, o)
		}
		m.callsByDep[k] = cs
	}
	m.mu.Unlock()
	for i, n := range outcomeCounts(c) {
		if n > 0 {
			cs[i].Add(float64(n))
		}
	}
}

// Forget deletes every series of a breaker that no instance reports any more.
func (m *metrics) Forget(k cbdash.DependencyKey) {
	if m == nil {
		return
	}
	m.latency.forget(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.stateLabel[k]; ok {
		m.state.DeleteLabelValues(k.Service, k.Breaker, old)
		delete(m.stateLabel, k)
	}
	if _, ok := m.callsByDep[k]; ok {
		for _, o := range outcomes {
			m.calls.DeleteLabelValues(k.Service, k.Breaker, o)
		}
		delete(m.callsByDep, k)
	}
}

// SubscriberDropped counts a subscriber dropped for falling behind.
func (m *metrics) SubscriberDropped() { m.subDrops.Inc() }

// Subscribers sets the number of live event subscribers.
func (m *metrics) Subscribers(n int) { m.subscribers.Set(float64(n)) }

// registerStoreMetrics exports the store writer's counters: transactions
// and operations committed (their ratio is the group size), operations
// that failed or were skipped, and groups run again after a deadlock.
func registerStoreMetrics(reg prometheus.Registerer, st *store.Store) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cbdash_store_transactions_total",
			Help: "Group transactions the store's writer committed.",
		}, func() float64 { return float64(st.Stats().Transactions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cbdash_store_operations_total",
			Help: "Writes the store's writer committed (a batch, a hello, a command...), in cbdash_store_transactions_total transactions.",
		}, func() float64 { return float64(st.Stats().Ops) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cbdash_store_failed_operations_total",
			Help: "Writes the store's writer could not commit.",
		}, func() float64 { return float64(st.Stats().FailedOps) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cbdash_store_skipped_operations_total",
			Help: "Batches the store's writer left unwritten because one before them, of the same agent connection, had failed (the agent resends them).",
		}, func() float64 { return float64(st.Stats().SkippedOps) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cbdash_store_retried_groups_total",
			Help: "Groups of batches PostgreSQL ended as a deadlock's or a serialization failure's victim (another collector's writer in the way) and the store's writer ran again.",
		}, func() float64 { return float64(st.Stats().Retried) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// CollectorID is the name of this collector in its per-collector metrics
// (Config.CollectorID, or the cluster node id).
func (c *Collector) CollectorID() string { return c.cfg.CollectorID }
