package hystrixgo_test

import (
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/afex/hystrix-go/hystrix"
	metricCollector "github.com/afex/hystrix-go/hystrix/metric_collector"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// The tests run real hystrix-go commands in testing/synctest bubbles:
// hystrix-go keeps time with time.Now and timers, which in a bubble are
// the bubble's clock, so minutes of calls run in seconds. hystrix-go
// starts two goroutines per circuit that it never stops (a bubble must
// end with none): endCircuits stops them once the calls are over.

// registrar records the sources the adapter registers, as an agent would
// take them (the end-to-end test in sdk/adapter/e2e uses a real agent
// and collector).
type registrar struct {
	mu     sync.Mutex
	srcs   []agent.Source
	refuse error
}

func (r *registrar) RegisterSource(s agent.Source) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		return r.refuse
	}
	r.srcs = append(r.srcs, s)
	return nil
}

func (r *registrar) names() (out []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.srcs {
		out = append(out, s.Describe().Name)
	}
	return out
}

// own are hystrix-go's own counts of a command: a metric collector of its
// own, registered beside the adapter's, which hystrix-go feeds every
// call's result as it feeds the adapter's (and the one its stream reads).
type own struct {
	mu     sync.Mutex
	t      breaker.Totals
	runSum time.Duration // RunDuration of the successes and failures
}

func (o *own) Update(r metricCollector.MetricResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := func(v float64) uint64 { return uint64(v) }
	o.t.Successes += n(r.Successes)
	o.t.Errors += n(r.Failures)
	o.t.Timeouts += n(r.Timeouts)
	o.t.RejectedOpen += n(r.ShortCircuits)
	o.t.RejectedBulkhead += n(r.Rejects)
	o.t.Ignored += n(r.ContextCanceled + r.ContextDeadlineExceeded)
	o.t.FallbackSuccesses += n(r.FallbackSuccesses)
	o.t.FallbackFailures += n(r.FallbackFailures)
	if r.Successes+r.Failures > 0 {
		o.runSum += r.RunDuration
	}
}

func (o *own) Reset() {} // hystrix-go clears its rolling counts; the totals go on

// totals are hystrix-go's own counts in the shape of breaker.Totals
// (Admitted: every call that was neither short-circuited nor rejected).
func (o *own) totals() (breaker.Totals, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.t
	t.Failures = t.Errors + t.Timeouts
	t.Admitted = t.Successes + t.Failures + t.Ignored
	return t, o.runSum
}

var (
	ownMu    sync.Mutex
	owns     = map[string]*own{}
	register sync.Once
)

// ownTotals makes hystrix-go keep its own counts (ownOf) of the circuits
// it creates from now on.
func ownTotals() {
	register.Do(func() {
		metricCollector.Registry.Register(func(name string) metricCollector.MetricCollector {
			ownMu.Lock()
			defer ownMu.Unlock()
			o := &own{}
			owns[name] = o
			return o
		})
	})
}

func ownOf(command string) *own {
	ownMu.Lock()
	defer ownMu.Unlock()
	return owns[command]
}

// endCircuits stops the goroutines hystrix-go started for the commands'
// circuits, once their calls are over, and forgets every circuit. The
// channels they range over are unexported fields, reached by reflection.
func endCircuits(t *testing.T, commands ...string) {
	t.Helper()
	for _, c := range commands {
		cb, _, err := hystrix.GetCircuit(c)
		if err != nil {
			t.Fatal(err)
		}
		closeField := func(v reflect.Value, path ...string) {
			for _, f := range path {
				if v.Kind() == reflect.Pointer {
					v = v.Elem()
				}
				v = v.FieldByName(f)
			}
			reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Close()
		}
		v := reflect.ValueOf(cb)
		closeField(v, "metrics", "Updates")
		closeField(v, "executorPool", "Metrics", "Updates")
	}
	hystrix.Flush()
}

// recorder records transitions as "from>to:cause".
type recorder struct {
	mu sync.Mutex
	ts []breaker.Transition
}

func (r *recorder) observe(t breaker.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ts = append(r.ts, t)
}

func (r *recorder) get() []breaker.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]breaker.Transition(nil), r.ts...)
}
