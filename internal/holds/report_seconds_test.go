package holds

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// reportFleet is two instances of pricing/db reporting one-second
// windows at their own phases (300 ms and 800 ms into the second) to the
// real store, and to the Manager as the collector does after the commit;
// each window holds 50 calls, 10 of them failed and 20 rejected by an
// open breaker (the demo's incident under a drill).
type reportFleet struct {
	t     *testing.T
	clk   interface{ Advance(time.Duration) }
	now   func() time.Time
	m     *Manager
	st    interface{}
	save  func(k Key, b protocol.Batch)
	last  map[Key]time.Time
	phase map[Key]time.Duration
	seq   map[Key]uint64
}

func newReportFleet(t *testing.T) *reportFleet {
	clk := clocktest.Virtual()
	st := storetest.Open(t, clk)
	f := &fleet{insts: make(map[Key]Instance)}
	r := &reportFleet{t: t, clk: clk, now: clk.Now, last: map[Key]time.Time{}, phase: map[Key]time.Duration{}, seq: map[Key]uint64{}}
	r.m = New(Config{Instances: f, Store: st, Events: nopEvents{}, Cluster: nopCluster{}, Now: clk.Now, CommandDelivery: time.Minute})
	if err := r.m.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, ph := range []time.Duration{300 * time.Millisecond, 800 * time.Millisecond} {
		k := Key{"pricing", []string{"i0", "i1"}[i]}
		f.connect(st, k)
		r.phase[k] = ph
		hello := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: k.Service, Instance: k.Instance, SDKVersion: "test",
			StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "db", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50, MinimumCalls: 10,
				OpenDurationMillis: 5000, HalfOpenMaxCalls: 1}}}
		if err := st.SaveHello(context.Background(), hello, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	r.save = func(k Key, b protocol.Batch) {
		r.seq[k]++
		b.Type, b.Seq, b.SentAt = protocol.TypeBatch, r.seq[k], r.now().UnixMilli()
		if _, err := st.SaveBatch(context.Background(), k.Service, k.Instance, 1, b, r.now()); err != nil {
			t.Fatal(err)
		}
		r.m.Observe(k, b.Windows)
	}
	return r
}

// run moves the clock 5 ms at a time for d, each instance reporting the
// second that ends at its phase.
func (r *reportFleet) run(d time.Duration) {
	for end := r.now().Add(d); r.now().Before(end); {
		r.clk.Advance(5 * time.Millisecond)
		into := time.Duration(r.now().UnixNano() % int64(time.Second))
		for k, ph := range r.phase {
			if into < ph || into >= ph+5*time.Millisecond {
				continue
			}
			from := r.last[k]
			r.last[k] = r.now()
			if from.IsZero() {
				continue
			}
			r.save(k, protocol.Batch{Windows: []protocol.Window{{Breaker: "db", Start: from.UnixMilli(), Millis: r.now().Sub(from).Milliseconds(),
				State: protocol.StateOpen, Counts: protocol.Counts{Admitted: 30, Successes: 20, Failures: 10, Errors: 10, RejectedOpen: 20}}}})
		}
	}
}

// to moves the clock to the next time ms into a second.
func (r *reportFleet) to(ms int) {
	into := r.now().UnixMilli() % 1000
	r.run(time.Duration((int64(ms)-into+1000)%1000+1000) * time.Millisecond)
}

func (r *reportFleet) drill(from, ms int) cbdash.HoldReport {
	r.t.Helper()
	ctx := context.Background()
	r.to(from)
	h, err := r.m.Create(ctx, holdOf("pricing"))
	if err != nil {
		r.t.Fatal(err)
	}
	r.run(time.Duration(ms) * time.Millisecond)
	if _, err := r.m.Release(ctx, h.ID, "ops", "done"); err != nil {
		r.t.Fatal(err)
	}
	r.run(3 * time.Second) // the reports of the last seconds arrive
	rep, err := r.m.Report(ctx, h.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

func callersDuring(r cbdash.HoldReport) (calls int64) {
	for _, d := range r.Dependencies {
		calls += d.During.Calls
	}
	return calls
}

// TestDrillReportCountsOneSetOfSeconds is finding 11 of the demo trial:
// a drill's instance totals (937 calls) and its callers' table (887) of
// one report disagreed: the instances counted every window report that
// overlapped the hold, the callers the store's seconds from the one the
// hold started in. Both now count the seconds whose middle the hold
// covered: a drill of 10.4 s from 600 ms into a second, of two
// instances reporting at 300 ms and 800 ms, counts 10 seconds on both.
func TestDrillReportCountsOneSetOfSeconds(t *testing.T) {
	r := newReportFleet(t)
	r.run(5 * time.Second)
	rep := r.drill(600, 10400)
	if got := rep.CountedTo.Sub(rep.CountedFrom); got != 10*time.Second {
		t.Errorf("counted %s (%v to %v), want 10 s", got, rep.CountedFrom, rep.CountedTo)
	}
	if rep.Total.Calls != 2*10*50 || callersDuring(rep) != rep.Total.Calls {
		t.Errorf("instance total %d calls, callers during %d, want both %d", rep.Total.Calls, callersDuring(rep), 2*10*50)
	}
	if md := string(ReportMarkdown(rep)); !strings.Contains(md, "- Counted: the whole seconds ") || !strings.Contains(md, "(10s): window reports are per second") {
		t.Errorf("report:\n%s\nwant the seconds counted said", md)
	}
}

// TestDrillReportOfAHoldUnderASecond is finding 10: a hold from 600 ms
// to 900 ms into a second showed a whole report of each instance (50
// calls, 20 rejected by the open breaker, not by the hold). It covers no
// second's middle: nothing is counted, and the report says why. One from
// 200 ms to 800 ms counts its second, and says that it counts whole
// seconds.
func TestDrillReportOfAHoldUnderASecond(t *testing.T) {
	r := newReportFleet(t)
	r.run(5 * time.Second)
	rep := r.drill(600, 300)
	if rep.Total.Calls != 0 || rep.Total.Counts.Rejected() != 0 || callersDuring(rep) != 0 {
		t.Errorf("a 300 ms hold counted %d calls, %d rejected (callers %d), want none", rep.Total.Calls, rep.Total.Counts.Rejected(), callersDuring(rep))
	}
	if md := string(ReportMarkdown(rep)); !strings.Contains(md, "- Counted: nothing: the hold lasted 300ms and covered the middle of no second") {
		t.Errorf("report:\n%s\nwant it to say nothing was counted, and why", md)
	}
	rep = r.drill(200, 600)
	if rep.CountedTo.Sub(rep.CountedFrom) != time.Second || rep.Total.Calls != 2*50 || callersDuring(rep) != rep.Total.Calls {
		t.Errorf("a 600 ms hold over a second's middle counted %s: %d calls, callers %d; want its second, 100 calls on both",
			rep.CountedTo.Sub(rep.CountedFrom), rep.Total.Calls, callersDuring(rep))
	}
}
