package collector

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/agent/agenttest"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Issue 35's fleet test: 20 instances on the real stack (real agents with
// real sdk/breaker breakers, the real collector on a SQLite store, the
// agents' websockets on an in-memory network), in a testing/synctest
// bubble: time is virtual, and it moves only when every goroutine of the
// stack is blocked, so the figures do not depend on the machine's load.
//
// The fleet: service checkout, breaker payments (minimum calls 10,
// threshold 50 %, open 5 s, one probe, count window of 20), 4 busy
// instances at 50 calls a second and 16 quiet ones at 2, each warmed with
// 10 successes. The dependency fails every call for 60 s, then recovers
// linearly over 30 s (a call succeeds with probability (t-60 s)/30 s).

const (
	fleetSize   = 20
	fleetBusy   = 4
	fleetOpen   = 5 * time.Second
	fleetStep   = 100 * time.Millisecond
	fleetOutage = 60 * time.Second
	fleetRecov  = 30 * time.Second
)

// fleetRun is what one run measured.
type fleetRun struct {
	outageCalls  int64           // calls admitted (sent to the dependency) during the 60 s outage
	failedCalls  int64           // calls that failed, outage and recovery
	probes       []time.Time     // probes during the outage (half_open > open or closed), fleet-wide
	maxProbes    int             // most probes in any open interval (5 s) of the outage
	deferrals    int             // defer_probes commands the collector recorded
	staggered    []time.Duration // the offsets of the releases at the verdicts closed, sorted
	advisories   int             // the quorum's force_open commands (advisories and the waves of a staggered return)
	waves        []time.Duration // the time boxes of the waves of the staggered returns
	retrips      int             // closed > open after the first closing, fleet-wide
	ownAfterStop []int           // per instance: own probes after the collector stopped (stop runs)
	rejAfterStop []int64         // per instance: rejections after the collector stopped
	firstOwn     []time.Duration
	endStates    []breaker.State
}

// fleetOptions shape a run.
type fleetOptions struct {
	rules     []cbdash.QuorumRule
	stopAt    time.Duration // stop the collector this long into the outage; 0 = never
	onlyFirst bool          // the fault is seen by instance i0 alone
	end       time.Duration // how long the run lasts from the outage's start; 0 = the outage, the recovery and 10 s
}

// stackInBubble is the collector and its store, serving agents on an
// in-memory network.
type stackInBubble struct {
	clk    *clocktest.Running // the bubble's time, from the test epoch: every part's clock
	net    *agenttest.MemNet
	col    *Collector
	srv    *httptest.Server
	token  string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startStackInBubble(t *testing.T, rules []cbdash.QuorumRule) *stackInBubble {
	t.Helper()
	clk := clocktest.NewRunning() // the bubble's time
	st := storetest.Open(t, clk)
	col, err := New(Config{Store: st, Clock: clk, Registerer: prometheus.NewRegistry(), PublishInterval: 250 * time.Millisecond, Quorum: rules})
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.CreateAgentToken(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	s := &stackInBubble{clk: clk, net: agenttest.NewMemNet(), col: col, token: token, done: make(chan error, 1)}
	s.srv = httptest.NewUnstartedServer(testMux(col))
	s.srv.Listener.Close()
	s.srv.Listener = s.net.Listen("collector.test:80")
	s.srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- col.Run(ctx) }()
	<-col.Ready()
	t.Cleanup(s.stop)
	return s
}

// stop stops the collector and its server: the agents lose it.
func (s *stackInBubble) stop() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.srv.Close()
	})
}

// probeMember is one instance.
type probeMember struct {
	name   string
	ag     *agent.Agent
	br     *breaker.Breaker
	every  int // one call every this many steps, or
	calls  int // this many calls a step
	mu     sync.Mutex
	probes []time.Time // probes, any time
	closes int         // half_open > closed
	trips  []time.Time // closed > open
}

func startProbeMember(t *testing.T, s *stackInBubble, i int) *probeMember {
	t.Helper()
	m := &probeMember{name: fmt.Sprintf("i%02d", i), every: 5}
	if i < fleetBusy {
		m.every, m.calls = 1, int(50*fleetStep/time.Second)
	}
	var err error
	m.br, err = breaker.New("payments", breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: fleetOpen,
		HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1, Window: breaker.Window{Kind: breaker.CountWindow, Size: 20}, Clock: s.clk})
	if err != nil {
		t.Fatal(err)
	}
	m.br.Subscribe(m.observe)
	m.ag, err = agent.New(agent.Config{URL: "ws://collector.test:80/api/v1/agent", Token: s.token, HTTPClient: s.net.Client(),
		Service: "checkout", Instance: m.name, Clock: s.clk, ReportInterval: 250 * time.Millisecond,
		ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ag.Register(m.br); err != nil {
		t.Fatal(err)
	}
	if err := m.ag.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = m.ag.Close(ctx)
	})
	return m
}

func (m *probeMember) observe(tr breaker.Transition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case tr.From == breaker.HalfOpen && (tr.Cause.Kind == breaker.CauseProbeFailed || tr.Cause.Kind == breaker.CauseProbesSucceeded):
		m.probes = append(m.probes, tr.At)
		if tr.To == breaker.Closed {
			m.closes++
		}
	case tr.From == breaker.Closed && tr.To == breaker.Open:
		m.trips = append(m.trips, tr.At)
	}
}

// dependency is the failing dependency: down for fleetOutage from start,
// then recovering over fleetRecov.
type dependency struct {
	clk   *clocktest.Running
	start time.Time
	rng   *rand.Rand
	only  string // "": every instance sees the fault; else only this one
}

// since is how long since the outage began.
func (d *dependency) since() time.Duration { return d.clk.Now().Sub(d.start) }

func (d *dependency) call(inst string) error {
	if d.only != "" && inst != d.only {
		return nil
	}
	t := d.since()
	if t < 0 {
		return nil
	}
	share := float64(t-fleetOutage) / float64(fleetRecov)
	if d.rng.Float64() < share {
		return nil
	}
	return errDown
}

// runFleet runs the 20 instances through the outage and the recovery
// and returns what it measured.
func runFleet(t *testing.T, o fleetOptions) fleetRun {
	s := startStackInBubble(t, o.rules)
	var fleet []*probeMember
	for i := range fleetSize {
		fleet = append(fleet, startProbeMember(t, s, i))
	}
	synctest.Wait()
	for _, m := range fleet {
		for range 10 {
			_ = m.br.Execute(context.Background(), func(context.Context) error { return nil })
		}
	}
	bubbletest.Advance(time.Second) // virtual: reports go out, the collector sees the fleet warm
	synctest.Wait()
	if dep, err := s.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}); err != nil ||
		dep.Instances != fleetSize || cbdash.QuorumOf(dep.PerInstance).Eligible != fleetSize {
		t.Fatalf("the collector does not see the fleet warm: %+v, %v", cbdash.QuorumOf(dep.PerInstance), err)
	}
	d := &dependency{clk: s.clk, start: s.clk.Now(), rng: rand.New(rand.NewPCG(35, 1))}
	if o.onlyFirst {
		d.only = fleet[0].name
	}
	var run fleetRun
	before := totals(fleet)
	var stopped time.Time
	end := cmp.Or(o.end, fleetOutage+fleetRecov+10*time.Second)
	for step := 0; d.since() < end; step++ {
		if o.stopAt > 0 && stopped.IsZero() && d.since() >= o.stopAt {
			s.stop()
			synctest.Wait() // the agents see the connection end
			stopped = s.clk.Now()
			before = totals(fleet)
		}
		if step == int(fleetOutage/fleetStep) && o.stopAt == 0 {
			after := totals(fleet)
			for i := range fleet {
				run.outageCalls += int64(after[i].Admitted - before[i].Admitted)
			}
		}
		drive(fleet, d, step, &run)
		bubbletest.Advance(fleetStep) // virtual time
		synctest.Wait()
	}
	run.measure(t, s, fleet, d.start, stopped, before)
	return run
}

func totals(fleet []*probeMember) []breaker.Totals {
	var out []breaker.Totals
	for _, m := range fleet {
		out = append(out, m.br.Snapshot().Totals)
	}
	return out
}

// drive makes one step's calls of every instance.
func drive(fleet []*probeMember, d *dependency, step int, run *fleetRun) {
	for i, m := range fleet {
		n := m.calls
		if m.calls == 0 && (step+i)%m.every == 0 {
			n = 1
		}
		for range n {
			_ = m.br.Execute(context.Background(), func(context.Context) error {
				err := d.call(m.name)
				if err != nil {
					run.failedCalls++
				}
				return err
			})
		}
	}
}

// measure fills run's figures at the end of a run.
func (run *fleetRun) measure(t *testing.T, s *stackInBubble, fleet []*probeMember, start, stopped time.Time, before []breaker.Totals) {
	t.Helper()
	after := totals(fleet)
	for i, m := range fleet {
		m.mu.Lock()
		for _, p := range m.probes {
			if !p.Before(start) && p.Before(start.Add(fleetOutage)) {
				run.probes = append(run.probes, p)
			}
		}
		if len(m.trips) > 1 {
			run.retrips += len(m.trips) - 1
		}
		if !stopped.IsZero() {
			own, first := 0, time.Duration(-1)
			for _, p := range m.probes {
				if !p.Before(stopped) && p.Before(start.Add(fleetOutage)) {
					own++
					if first < 0 {
						first = p.Sub(stopped)
					}
				}
			}
			run.ownAfterStop = append(run.ownAfterStop, own)
			run.firstOwn = append(run.firstOwn, first)
			run.rejAfterStop = append(run.rejAfterStop, int64(after[i].Rejected()-before[i].Rejected()))
		}
		m.mu.Unlock()
		run.endStates = append(run.endStates, m.br.State())
	}
	slices.SortFunc(run.probes, func(a, b time.Time) int { return a.Compare(b) })
	for i, p := range run.probes {
		n := 0
		for _, q := range run.probes[i:] {
			if q.Sub(p) < fleetOpen {
				n++
			}
		}
		run.maxProbes = max(run.maxProbes, n)
	}
	cmds, err := s.col.store.Commands(context.Background(), cbdash.CommandQuery{Service: "checkout", Breaker: "payments", Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	var ended []cbdash.Command
	for _, c := range cmds {
		switch {
		case c.Action == protocol.ActionDeferProbes:
			run.deferrals++
			if strings.HasPrefix(c.Reason, "probe rotation ended: the probes' verdict is closed") {
				ended = append(ended, c)
			}
		case c.Actor == cbdash.QuorumActor && c.Action == protocol.ActionForceOpen:
			run.advisories++
			if strings.HasPrefix(c.Reason, "quorum's first close, staggered return: ") {
				run.waves = append(run.waves, c.TTL)
			}
		}
	}
	for _, c := range ended {
		run.staggered = append(run.staggered, c.TTL)
	}
	slices.Sort(run.staggered)
}

func quorumRulesOf(t *testing.T, rules ...string) []cbdash.QuorumRule {
	t.Helper()
	var out []cbdash.QuorumRule
	for _, s := range rules {
		r, err := cbdash.ParseQuorumRule(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestFleetProbeRotation runs the fleet with independent breakers, with
// quorum advisories, and with quorum advisories and the probe rotation
// (K = 1), and compares the calls sent into the failing dependency and
// the probes per open interval (with CBDASH_QUORUM_MEASURE=1, quorum
// advisories alone too):
//
//	CBDASH_QUORUM_MEASURE=1 go test -run TestFleetProbeRotation -v ./internal/collector/
func TestFleetProbeRotation(t *testing.T) {
	var independent, advised, rotated fleetRun
	synctest.Test(t, func(t *testing.T) { independent = runFleet(t, fleetOptions{}) })
	if os.Getenv("CBDASH_QUORUM_MEASURE") != "" { // quorum advisories alone, for comparison
		synctest.Test(t, func(t *testing.T) {
			advised = runFleet(t, fleetOptions{rules: quorumRulesOf(t, "checkout/payments:q=20%,m=3,box=20s")})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		rotated = runFleet(t, fleetOptions{rules: quorumRulesOf(t, "checkout/payments:q=20%,m=3,box=20s,probes=1")})
	})
	runs := []struct {
		name string
		run  fleetRun
	}{{"independent", independent}, {"quorum+rotation (K=1)", rotated}}
	if advised.outageCalls > 0 {
		runs = slices.Insert(runs, 1, struct {
			name string
			run  fleetRun
		}{"quorum", advised})
	}
	for _, r := range runs {
		t.Logf("%-22s calls into the failing dependency in 60 s: %4d; probes in the outage: %3d (at most %2d per 5 s open interval); failed calls, outage and recovery: %4d; re-trips: %d; quorum force_open commands: %d; defer_probes commands: %d",
			r.name, r.run.outageCalls, len(r.run.probes), r.run.maxProbes, r.run.failedCalls, r.run.retrips, r.run.advisories, r.run.deferrals)
	}
	ratio := float64(independent.outageCalls) / float64(max(rotated.outageCalls, 1))
	t.Logf("coordinated (quorum + rotation) sends %.2fx fewer calls into the failing dependency", ratio)
	if ratio < 4 {
		t.Errorf("calls into the failing dependency: independent %d, coordinated %d: %.2fx fewer, want at least 4x",
			independent.outageCalls, rotated.outageCalls, ratio)
	}
	if rotated.maxProbes > 1 {
		t.Errorf("coordinated: %d probes in one open interval, want at most K = 1 (probes at %v)", rotated.maxProbes, rotated.probes)
	}
	t.Logf("at the verdicts closed, the waiting instances were let probe at offsets %v, spread over the open duration (the breakers have no ramp)", rotated.staggered)
	if n := len(rotated.staggered); n < 2 || rotated.staggered[n-1] == 0 || rotated.staggered[n-1] >= fleetOpen {
		t.Errorf("releases at the verdicts: offsets %v, want them spread within %v, not all at once", rotated.staggered, fleetOpen)
	}
	slices.Sort(rotated.waves)
	t.Logf("at the quorum's first close, the advised instances returned in waves: the first at once, the others held %v", rotated.waves)
	if len(rotated.waves) == 0 || rotated.waves[len(rotated.waves)-1] >= fleetOpen {
		t.Errorf("staggered return of the advised instances: waves %v, want some within %v", rotated.waves, fleetOpen)
	}
	if independent.maxProbes < fleetSize/2 {
		t.Errorf("independent: at most %d probes per open interval; the baseline should see one per instance", independent.maxProbes)
	}
	for i, s := range rotated.endStates {
		if s != breaker.Closed {
			t.Errorf("coordinated: i%02d ends %v, want closed after the recovery", i, s)
		}
	}
}

// A fault seen by 1 instance of 20 (a bad network path) makes no quorum:
// no advisory, no deferral, and no other instance leaves closed.
func TestFleetFaultOnOneInstanceTripsNoOtherOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := runFleet(t, fleetOptions{onlyFirst: true, end: fleetOutage, rules: quorumRulesOf(t, "checkout/payments:q=20%,m=3,box=20s,probes=1")})
		if run.advisories != 0 || run.deferrals != 0 {
			t.Errorf("one instance of 20 failing: %d advisories, %d defer_probes, want none", run.advisories, run.deferrals)
		}
		if len(run.probes) == 0 {
			t.Errorf("i00 never probed on its own")
		}
		for i, s := range run.endStates[1:] {
			if s != breaker.Closed {
				t.Errorf("i%02d is %v, want closed: it never saw the fault", i+1, s)
			}
		}
	})
}

// The collector stopped 30 s into the outage leaves every instance
// protecting itself: each keeps rejecting, and probes on its own; an
// instance whose probes the rotation deferred probes within its own
// open duration of the loss.
func TestFleetCollectorStoppedMidOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := runFleet(t, fleetOptions{stopAt: 30 * time.Second, end: fleetOutage, rules: quorumRulesOf(t, "checkout/payments:q=20%,m=3,box=20s,probes=1")})
		if run.deferrals == 0 {
			t.Fatal("no deferral before the stop: the rotation did not run")
		}
		for i := range fleetSize {
			if run.rejAfterStop[i] == 0 {
				t.Errorf("i%02d rejected nothing after the collector stopped", i)
			}
			if run.ownAfterStop[i] == 0 {
				t.Errorf("i%02d did not probe on its own after the collector stopped", i)
			}
			if i < fleetBusy && run.firstOwn[i] > fleetOpen+fleetStep {
				t.Errorf("i%02d (deferred) first probed %v after the loss, want within its open duration %v", i, run.firstOwn[i], fleetOpen)
			}
		}
		t.Logf("after the stop: rejections %v, own probes %v, first own probe after %v", run.rejAfterStop, run.ownAfterStop, run.firstOwn)
	})
}
