package collector

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// What two collectors behind their bus hold (issue 36). The publisher's
// queue (fleetQueue updates) is bounded by bytes too: an update waits
// only while the encoded updates queued stay under fleetQueueBytes, and
// one that would go over is dropped and counted as when the queue is full
// (cbdash_collector_fleet_updates_dropped_total): the others' views miss
// it until their next resynchronisation, the store has it. The bus's
// subscribers are bounded by cluster.Config.SubscriberBytes. Both are
// exported (registerBusMetrics).

// fleetQueueBytes bounds the encoded updates waiting to be published.
const fleetQueueBytes = 16 << 20

// fleetBudget counts the bytes of the updates in the publisher's queue.
type fleetBudget struct{ queued atomic.Int64 }

// reserve takes n bytes of the budget; false (nothing taken) when the
// queue would go over fleetQueueBytes.
func (b *fleetBudget) reserve(n int) bool {
	if b.queued.Add(int64(n)) > fleetQueueBytes {
		b.queued.Add(-int64(n))
		return false
	}
	return true
}

// release gives back n bytes: an update left the queue.
func (b *fleetBudget) release(n int) { b.queued.Add(-int64(n)) }

// subscriberStatser is a bus that says what its subscribers hold
// (cluster.Postgres, cluster.Local).
type subscriberStatser interface {
	SubscriberStats() (heldBytes int64, dropped int)
}

// registerBusMetrics exports the bytes the fleet's publisher queue and
// the bus's subscribers hold, and the subscribers the bus dropped.
func registerBusMetrics(reg prometheus.Registerer, f *fleet) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cbdash_collector_fleet_queue_bytes",
			Help: "Bytes of encoded live updates waiting to be published to the other collectors (at most 16 MiB; beyond, updates are dropped and counted in cbdash_collector_fleet_updates_dropped_total).",
		}, func() float64 { return float64(f.budget.queued.Load()) }),
	}
	if st, ok := f.bus.(subscriberStatser); ok {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "cbdash_cluster_subscriber_bytes",
				Help: "Bytes of bus messages waiting for this collector's subscribers (each at most 32 MiB; a subscriber over it is dropped and resynchronises from the store).",
			}, func() float64 { b, _ := st.SubscriberStats(); return float64(b) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "cbdash_cluster_subscriber_drops_total",
				Help: "Bus subscribers dropped for falling behind (their buffer or byte bound full); each resynchronises from the store.",
			}, func() float64 { _, d := st.SubscriberStats(); return float64(d) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
