package holds

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// drillSim is a fleet of instances of service "pricing" whose breaker
// "db" is forced open and reports a window every second (each at its own
// phase), on a virtual clock the test moves, with a Manager checking stop
// conditions every quarter second (at its own phase).
type drillSim struct {
	t     *testing.T
	clk   interface{ Advance(time.Duration) }
	now   func() time.Time
	m     *Manager
	conns map[Key]*recordConn
	phase map[Key]time.Duration // report phase within the second
	last  map[Key]time.Time     // end of the last report
	rate  int64                 // rejected calls per second per instance
}

func newDrillSim(t *testing.T, n int, defaults ...cbdash.StopCondition) *drillSim {
	t.Helper()
	clk := clocktest.Virtual()
	st := storetest.Open(t, clk)
	f := &fleet{insts: make(map[Key]Instance)}
	s := &drillSim{t: t, clk: clk, now: clk.Now, conns: map[Key]*recordConn{}, phase: map[Key]time.Duration{},
		last: map[Key]time.Time{}, rate: 100}
	s.m = New(Config{Instances: f, Store: st, Events: nopEvents{}, Cluster: nopCluster{}, Now: clk.Now,
		CommandDelivery: time.Minute, DefaultStops: defaults})
	if err := s.m.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k := Key{"pricing", fmt.Sprintf("i%d", i)}
		s.conns[k] = f.connect(st, k)
	}
	return s
}

// failShare is the share of fallbacks failing at time t: 0 before from,
// share from then on.
type failShare struct {
	from  time.Time
	share float64
}

func (f failShare) failedIn(a, b time.Time, calls int64) int64 {
	if !b.After(f.from) {
		return 0
	}
	part := float64(b.Sub(maxTime(a, f.from))) / float64(b.Sub(a))
	return int64(float64(calls) * part * f.share)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// report sends instance k's window report ending now.
func (s *drillSim) report(k Key, fail failShare) {
	now := s.now()
	from := s.last[k]
	s.last[k] = now
	if from.IsZero() {
		return
	}
	calls := s.rate * int64(now.Sub(from)) / int64(time.Second)
	failed := fail.failedIn(from, now, calls)
	s.m.Observe(k, []protocol.Window{{Breaker: "db", Start: from.UnixMilli(), Millis: now.Sub(from).Milliseconds(),
		State: protocol.StateForcedOpen, Counts: protocol.Counts{RejectedForced: calls, FallbackSuccess: calls - failed,
			FallbackFailure: failed}}})
}

// run moves the clock by step until until, reporting and checking on
// their phases; it stops early once hold id is released and returns when.
func (s *drillSim) run(ctx context.Context, id string, until time.Time, checkPhase time.Duration, fail failShare) (time.Time, bool) {
	const step = 5 * time.Millisecond
	for s.now().Before(until) {
		s.clk.Advance(step)
		now := s.now()
		into := time.Duration(now.UnixNano() % int64(time.Second))
		for k, ph := range s.phase {
			if into >= ph && into < ph+step {
				s.report(k, fail)
			}
		}
		if time.Duration(now.UnixNano()%int64(slot)) < step+checkPhase && time.Duration(now.UnixNano()%int64(slot)) >= checkPhase {
			s.m.CheckStops(ctx)
			h, err := s.m.Hold(ctx, id)
			if err != nil {
				s.t.Fatal(err)
			}
			if !h.ReleasedAt.IsZero() {
				return now, true
			}
		}
	}
	return time.Time{}, false
}

// releasedEverywhere reports the instances not sent hold id's release.
func (s *drillSim) notReleased(id string) []string {
	var out []string
	for k, c := range s.conns {
		got, _ := c.delivered()
		if !slices.ContainsFunc(got, func(cmd cbdash.Command) bool { return cmd.ID == ReleaseCommandID(id, "pricing") }) {
			out = append(out, k.Instance)
		}
	}
	return out
}

// A drill whose stop condition is a fallback failure rate over 5 % is
// stopped within 2 s of its fallbacks starting to fail for half the
// calls: p99 over 20 runs on the virtual clock, each with its own phases
// of reports and checks and its own moment of failure. Every covered
// instance is sent the release, and the hold records the breach, STOPPED
// in its report. Before the failures, three healthy seconds stop nothing.
func TestAStopConditionReleasesEveryCoveredInstanceWithin2sOfTheBreach(t *testing.T) {
	ctx := context.Background()
	s := newDrillSim(t, 4)
	stop, err := cbdash.ParseStopCondition("fallback-failure-rate>5%")
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(32, 1))
	var took []time.Duration
	for run := range 20 {
		for k := range s.conns {
			s.phase[k] = time.Duration(rnd.IntN(200)) * 5 * time.Millisecond
			delete(s.last, k)
		}
		req := holdOf("pricing")
		req.StopIf = []cbdash.StopCondition{stop}
		h, err := s.m.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		checkPhase := time.Duration(rnd.IntN(50)) * 5 * time.Millisecond
		fail := failShare{from: s.now().Add(3*time.Second + time.Duration(rnd.IntN(1000))*time.Millisecond), share: 0.5}
		if at, stopped := s.run(ctx, h.ID, fail.from, checkPhase, fail); stopped {
			t.Fatalf("run %d: stopped at %s before any fallback failed", run, at)
		}
		at, stopped := s.run(ctx, h.ID, fail.from.Add(10*time.Second), checkPhase, fail)
		if !stopped {
			t.Fatalf("run %d: not stopped 10 s after the fallbacks began to fail", run)
		}
		took = append(took, at.Sub(fail.from))
		if left := s.notReleased(h.ID); len(left) > 0 {
			t.Fatalf("run %d: %v not sent the release", run, left)
		}
		checkStopped(t, s.m, h.ID, stop)
		s.clk.Advance(2 * time.Minute) // the next run starts with no counts of this one
		s.m.Sweep(ctx)
	}
	slices.Sort(took)
	p99 := took[int(math.Ceil(0.99*float64(len(took))))-1] // nearest rank
	t.Logf("release after the breach over %d runs: min %v, median %v, p99 %v", len(took), took[0], took[len(took)/2], took[len(took)-1])
	if p99 > 2*time.Second {
		t.Errorf("p99 of the release after the breach = %v, want within 2 s (all: %v)", p99, took)
	}
}

// checkStopped checks that hold id was released for a breach of stop,
// and that its report says so.
func checkStopped(t *testing.T, m *Manager, id string, stop cbdash.StopCondition) {
	t.Helper()
	r, err := m.Report(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	h := r.Hold
	if h.Breach == nil || h.Breach.Condition != stop || h.ReleasedBy != cbdash.StopActor {
		t.Fatalf("hold %+v: want released by %q for a breach of %s", h, cbdash.StopActor, stop)
	}
	if !strings.HasPrefix(h.ReleaseReason, "stop condition: fallback failure rate ") || !strings.Contains(h.ReleaseReason, " > 5 % at ") {
		t.Errorf("release reason %q", h.ReleaseReason)
	}
	if len(h.Breach.Instances) == 0 || h.Breach.Value <= 5 {
		t.Errorf("breach %+v: want the instances above 5 %% and the value", h.Breach)
	}
	md := string(ReportMarkdown(r))
	if !strings.Contains(md, "STOPPED") || !strings.Contains(md, mdText(h.ReleaseReason)) {
		t.Errorf("report does not say STOPPED with the breach:\n%s", md)
	}
}

// Pre-flight refuses a drill (a force open with stop conditions) while an
// incident is open on its dependency, while another drill covers it, and
// while one of its stop conditions is breached on the target now; the dry
// run says which. A hold without stop conditions is no drill and starts.
func TestPreflightRefusesADrillWithTheReason(t *testing.T) {
	ctx := context.Background()
	s := newDrillSim(t, 2, cbdash.StopCondition{Metric: cbdash.StopFallbackFailureRate, Above: 20})
	st := s.m.cfg.Store.(interface {
		CreateIncident(context.Context, cbdash.Incident) (int64, error)
	})
	id, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "pricing", Breaker: "db"},
		Start: s.now(), Open: true, Instances: []string{"i0"}, Opens: 1, FirstInstance: "i0"})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, s.m, holdOf("pricing"), fmt.Sprintf("incident %d is open on pricing/db since ", id))
	wantRefused(t, s.m, holdOf("*"), fmt.Sprintf("incident %d is open on pricing/db since ", id))
	// The refusal says what to do: wait, or hold without stop conditions
	// (this server has default ones: drop them).
	wantRefused(t, s.m, holdOf("pricing"), fmt.Sprintf("incident %d is open on pricing/db since ", id),
		"wait for it to end (the Incidents page, or cbdash incidents); or, to hold it anyway (a hold, not a drill), force it open without stop conditions",
		"--drop-stop-if '*' --drop-reason")

	// Without stop conditions (the defaults dropped, with a reason) it is
	// an operator's force open, not a drill: it starts.
	own := holdOf("pricing")
	own.DropStops, own.DropReason = []string{"*"}, "protect the database during the incident"
	h, err := s.m.Create(ctx, own)
	if err != nil {
		t.Fatalf("a hold without stop conditions during an incident: %v", err)
	}
	if len(h.Stops) != 0 || h.DropReason != own.DropReason {
		t.Errorf("hold %+v: want no stops and the drop reason kept", h)
	}
}

func TestPreflightRefusesADrillWhileAnotherCoversItOrAStopIsBreachedNow(t *testing.T) {
	ctx := context.Background()
	s := newDrillSim(t, 2, cbdash.StopCondition{Metric: cbdash.StopFallbackFailureRate, Above: 20})
	first, err := s.m.Create(ctx, holdOf("pricing"))
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, s.m, holdOf("*"), "drill "+first.ID+" (pricing/db) covers it until ", "or release it first (cbdash release "+first.ID+")")
	if _, err := s.m.Release(ctx, first.ID, "ops", "done"); err != nil {
		t.Fatal(err)
	}
	// The breaker is open on its own and its fallbacks fail for 30 % of
	// the rejected calls: over the default's 20 %.
	f := s.m.cfg.Instances.(*fleet)
	f.mu.Lock()
	for k, in := range f.insts {
		in.Last = map[string]protocol.Counts{"db": {RejectedOpen: 100, FallbackSuccess: 70, FallbackFailure: 30}}
		f.insts[k] = in
	}
	f.mu.Unlock()
	wantRefused(t, s.m, holdOf("pricing"), "stop condition fallback-failure-rate>20% is already breached on the target: 30 % now")
}

// wantRefused checks that Create refuses req with a conflict naming want,
// and that the dry run says it, with advice (each in the same reason).
func wantRefused(t *testing.T, m *Manager, req cbdash.HoldRequest, want string, advice ...string) {
	t.Helper()
	p, err := m.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Refused, func(r string) bool {
		return strings.HasPrefix(r, want) && !slices.ContainsFunc(advice, func(a string) bool { return !strings.Contains(r, a) })
	}) {
		t.Errorf("plan refused %q, want %q with %q", p.Refused, want, advice)
	}
	_, err = m.Create(context.Background(), req)
	if !errors.Is(err, cbdash.ErrConflict) || !strings.Contains(err.Error(), "drill refused by pre-flight: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("create: %v, want a conflict: %q", err, want)
	}
}

// A stepped drill covers its first step's share, then, its stop
// conditions checked, the next step's: one whose first step breaches
// stops there (its breach names step 1) and never sends the hold to an
// instance outside the first step's share; one that does not breach
// reaches every instance when its second step is due. The report has
// each step's figures.
func TestASteppedDrillStopsAtTheStepThatBreachesAndNeverCoversTheNext(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		share float64 // of fallbacks failing
	}{{"breaching", 0.5}, {"healthy", 0}} {
		t.Run(c.name, func(t *testing.T) {
			s := newDrillSim(t, 20)
			for k := range s.conns {
				s.phase[k] = time.Duration(len(k.Instance)*37%200) * 5 * time.Millisecond
			}
			req := holdOf("pricing")
			req.StopIf = []cbdash.StopCondition{{Metric: cbdash.StopFallbackFailureRate, Above: 5}}
			req.Steps = []cbdash.HoldStep{{Share: 25, For: 5 * time.Second}, {Share: 100, For: time.Minute}}
			h, err := s.m.Create(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			first := s.holdSent(h.ID)
			if len(first) == 0 || len(first) == len(s.conns) {
				t.Fatalf("first step covered %v of %d instances", first, len(s.conns))
			}
			for _, in := range first {
				if !cbdash.InShare(in, 25) {
					t.Fatalf("first step covered %s, outside its 25 %%", in)
				}
			}
			_, stopped := s.run(ctx, h.ID, s.now().Add(8*time.Second), 0, failShare{from: s.now(), share: c.share})
			r, err := s.m.Report(ctx, h.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Steps) != 2 || r.Steps[0].Instances != len(first) {
				t.Fatalf("report steps %+v, want 2 with %d instances first", r.Steps, len(first))
			}
			if c.share > 0 {
				if !stopped || r.Hold.Breach == nil || r.Hold.Breach.Step != 1 || r.Steps[1].Reached {
					t.Fatalf("stopped %v, breach %+v, steps %+v: want stopped at step 1, step 2 never reached", stopped, r.Hold.Breach, r.Steps)
				}
				if got := s.holdSent(h.ID); len(got) != len(first) {
					t.Fatalf("the hold was sent to %v after its first step %v breached", got, first)
				}
				return
			}
			if stopped || !r.Steps[1].Reached || len(s.holdSent(h.ID)) != len(s.conns) {
				t.Fatalf("healthy: stopped %v, steps %+v, sent to %v: want every instance at step 2", stopped, r.Steps, s.holdSent(h.ID))
			}
		})
	}
}

// holdSent lists the instances sent hold id's command, sorted.
func (s *drillSim) holdSent(id string) []string {
	var out []string
	for k, c := range s.conns {
		got, _ := c.delivered()
		if slices.ContainsFunc(got, func(cmd cbdash.Command) bool { return cmd.ID == CommandID(id, "pricing") }) {
			out = append(out, k.Instance)
		}
	}
	slices.Sort(out)
	return out
}

// "error-rate>30% for 3s" stops a drill only once the callers' error rate
// has stayed above 30 % for 3 s, not at its first breach.
func TestAStopConditionWithForWaitsForItsDuration(t *testing.T) {
	ctx := context.Background()
	s := newDrillSim(t, 3)
	for i, k := range []Key{{"pricing", "i0"}, {"pricing", "i1"}, {"pricing", "i2"}} {
		s.phase[k] = time.Duration(i) * 300 * time.Millisecond
	}
	stop, err := cbdash.ParseStopCondition("error-rate>30% for 3s")
	if err != nil {
		t.Fatal(err)
	}
	req := holdOf("pricing")
	req.StopIf = []cbdash.StopCondition{stop}
	h, err := s.m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fail := failShare{from: s.now().Add(2 * time.Second), share: 0.5}
	at, stopped := s.run(ctx, h.ID, fail.from.Add(10*time.Second), 0, fail)
	if took := at.Sub(fail.from); !stopped || took < 3*time.Second || took > 5*time.Second {
		t.Fatalf("stopped %v, %v after the errors began; want between 3 s and 5 s", stopped, took)
	}
	r, err := s.m.Report(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b := r.Hold.Breach; b == nil || b.Condition != stop || !strings.Contains(r.Hold.ReleaseReason, "error rate ") ||
		!strings.Contains(r.Hold.ReleaseReason, "> 30 % for 3s at ") {
		t.Fatalf("breach %+v, reason %q", b, r.Hold.ReleaseReason)
	}
}

// p99 is read from the latency histogram of the admitted calls, and not
// below StopMinCalls of them.
func TestStopValueP99(t *testing.T) {
	c := cbdash.StopCondition{Metric: cbdash.StopP99, Above: 100}
	lat := make([]int64, protocol.NumLatencyBuckets)
	lat[len(lat)-2] = 20 // every call in a slow bucket
	hc := cbdash.HoldCounts{Counts: protocol.Counts{Admitted: 20, Successes: 20}, Latency: lat}
	if v, ok := stopValue(c, hc, cbdash.StopMinCalls); !ok || v <= 100 {
		t.Errorf("p99 of slow calls = %v, %v", v, ok)
	}
	hc.Counts.Admitted = 5
	if _, ok := stopValue(c, hc, cbdash.StopMinCalls); ok {
		t.Error("p99 computed over 5 calls")
	}
}
