package ingest

import (
	"encoding/json"
	"flag"
	"fmt"
	"github.com/cbdash/cbdash/internal/live"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// fleetLoad is live state fed as `cbdash loadgen` feeds a collector:
// instances agents of breakers breakers each, every one sending a batch
// of one window report per breaker per second, decoded as sessions
// decode them, on a virtual clock; the collector publishes (computes)
// every PublishInterval (1 s).
type fleetLoad struct {
	l         *live.State
	clk       *breakertest.Clock
	instances int
	names     []string
	keys      []live.Key
	seq       uint64
}

func newFleetLoad(tb testing.TB, instances, breakers int) *fleetLoad {
	tb.Helper()
	clk := breakertest.NewClock(clocktest.Noon())
	f := &fleetLoad{l: live.New(live.Config{Now: clk.Now, StaleAfter: 15 * time.Second, GoneAfter: 10 * time.Minute, SubscriberBuffer: 1024}), clk: clk, instances: instances}
	for i := range breakers {
		f.names = append(f.names, fmt.Sprintf("dep-%02d", i))
	}
	for i := range instances {
		h := protocol.Hello{
			Type: protocol.TypeHello, Protocol: protocol.Version, Service: "loadgen", Instance: fmt.Sprintf("inst-%05d", i),
			SDKVersion: "loadgen", StartedAt: 1, Labels: map[string]string{"region": "local"},
		}
		for _, n := range f.names {
			h.Breakers = append(h.Breakers, protocol.BreakerConfig{
				Name: n, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 20,
				OpenDurationMillis: 5000, HalfOpenMaxCalls: 3, HalfOpenSuccessThreshold: 3,
			})
		}
		data, err := json.Marshal(h)
		if err != nil {
			tb.Fatal(err)
		}
		m, _, err := decode(data)
		if err != nil || m.Hello == nil {
			tb.Fatalf("decode hello: %v", err)
		}
		f.keys = append(f.keys, live.Key{Service: m.Hello.Service, Instance: m.Hello.Instance})
		f.l.Hello(m.Hello, 0, nil, clk.Now(), nil)
	}
	return f
}

// batch returns instance i's next batch, encoded as an agent encodes it
// and decoded as a session decodes it.
func (f *fleetLoad) batch(tb testing.TB, i int) *protocol.Batch {
	now := f.clk.Now().UnixMilli()
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: f.seq + 1, SentAt: now, Windows: make([]protocol.Window, len(f.names))}
	for j, n := range f.names {
		ok, failed := int64(80+(i+j)%40), int64((i*7+j)%5)
		lat := make([]int64, protocol.NumLatencyBuckets)
		lat[3], lat[4], lat[6] = ok/2, ok-ok/2, failed
		b.Windows[j] = protocol.Window{
			Breaker: n, Start: now - 1000, Millis: 1000, State: protocol.StateClosed, InFlight: int64(j % 4),
			Latency: lat, LatencySumMs: float64(ok*12 + failed*80),
			Counts:   protocol.Counts{Admitted: ok + failed, Successes: ok, Failures: failed, Errors: failed},
			Headroom: protocol.Headroom{Calls: 100, Failures: failed * 2, MinimumCalls: 20, FailureRate: float64(failed * 2), FailureRateThreshold: 50},
		}
	}
	data, err := json.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	m, _, err := decode(data)
	if err != nil || m.Batch == nil {
		tb.Fatalf("decode batch: %v", err)
	}
	return m.Batch
}

// apply applies instance i's batch b, received now.
func (f *fleetLoad) apply(tb testing.TB, i int, b *protocol.Batch) {
	if !f.l.ApplyNow(live.Update{Key: f.keys[i], Batch: b, At: f.clk.Now()}) {
		tb.Fatalf("batch %d of instance %d not applied", b.Seq, i)
	}
}

// second runs one second: every instance's batch, spread over the
// second, then a publication. between, when not nil, runs after each
// batch applied.
func (f *fleetLoad) second(tb testing.TB, between func(applied int)) {
	step := time.Second / time.Duration(f.instances)
	for i := range f.instances {
		f.clk.Advance(step)
		f.apply(tb, i, f.batch(tb, i))
		if between != nil {
			between(i + 1)
		}
	}
	f.seq++
	f.l.Flush()
}

// liveHeapProfile names a file for BenchmarkLiveHeapAt1000x20 to write a
// heap profile to, in the middle of its last publish interval (a
// benchmark's -memprofile is written once live state is gone).
var liveHeapProfile = flag.String("liveheap.profile", "", "write a heap profile of BenchmarkLiveHeapAt1000x20's live state to this file")

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkLiveHeapAt1000x20 measures the heap live state holds at
// 1,000 instances x 20 breakers under `cbdash loadgen`'s load (see
// fleetLoad), after a GC, per breaker: B/breaker is the mean over ten
// moments spread across a publish interval (as a heap profile taken at
// any GC sees it), B/breaker-max the largest (just before a
// publication, when every line of the interval is still to be rebuilt).
// ns/op is one second of load (20,000 window reports, decoding and the
// test's own encoding included).
func BenchmarkLiveHeapAt1000x20(b *testing.B) { benchmarkLiveHeap(b, 1000, 20) }

// BenchmarkLiveHeapAt5000x4 is BenchmarkLiveHeapAt1000x20 at 5,000
// instances x 4 breakers (as many window reports, five times the
// instances).
func BenchmarkLiveHeapAt5000x4(b *testing.B) { benchmarkLiveHeap(b, 5000, 4) }

func benchmarkLiveHeap(b *testing.B, instances, breakers int) {
	base := heapAlloc()
	f := newFleetLoad(b, instances, breakers)
	for range 3 {
		f.second(b, nil)
	}
	b.ResetTimer()
	for range b.N {
		f.second(b, nil)
	}
	b.StopTimer()
	var sum, peak float64
	samples := 0
	f.second(b, func(applied int) {
		if applied%(instances/10) != 0 {
			return
		}
		per := float64(heapAlloc()-base) / float64(instances*breakers)
		if applied == instances/2 && *liveHeapProfile != "" {
			writeHeapProfile(b, *liveHeapProfile)
		}
		sum += per
		peak = max(peak, per)
		samples++
	})
	runtime.KeepAlive(f)
	b.ReportMetric(sum/float64(samples), "B/breaker")
	b.ReportMetric(peak, "B/breaker-max")
}

func writeHeapProfile(tb testing.TB, name string) {
	tb.Helper()
	out, err := os.Create(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer out.Close()
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkApplyAt1000x20 applies batches of 20 window reports to live
// state of 1,000 instances x 20 breakers (see fleetLoad) as the apply
// loop does, and publishes every dependency (a compute each) once a
// second of load: ns/op is per batch, the computes included, decoding
// not. perInterval is how many batches each instance sends per publish
// interval: 1 as agents do, more as one replays its backlog.
func BenchmarkApplyAt1000x20(b *testing.B) {
	for _, perInterval := range []int{1, 5} {
		b.Run(fmt.Sprintf("perInterval=%d", perInterval), func(b *testing.B) {
			f := newFleetLoad(b, 1000, 20)
			for range 2 {
				f.second(b, nil)
			}
			batches := make([]*protocol.Batch, f.instances)
			step := time.Second / time.Duration(f.instances*perInterval)
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for n, round := 0, 0; n < b.N; round++ {
				b.StopTimer()
				for i := range batches {
					batches[i] = f.batch(b, i)
				}
				b.StartTimer()
				cpu0 := processCPU()
				for i := 0; i < f.instances && n < b.N; i, n = i+1, n+1 {
					f.clk.Advance(step)
					f.apply(b, i, batches[i])
				}
				f.seq++
				if round%perInterval == perInterval-1 {
					f.l.Flush()
				}
				cpu += processCPU() - cpu0
			}
			// CPU time, beside ns/op: steadier than wall time on a busy
			// machine.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU returns the CPU time this process has used (user and
// system, every thread, the garbage collector's included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
