package incident_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// agentLog stores transitions as agents send them: a hello per instance,
// then one batch per call, received at the given time.
type agentLog struct {
	t   *testing.T
	st  *store.Store
	seq map[string]uint64
}

func newAgentLog(t *testing.T, st *store.Store, service string, breakers []string, instances ...string) *agentLog {
	l := &agentLog{t: t, st: st, seq: map[string]uint64{}}
	var cfgs []protocol.BreakerConfig
	for _, b := range breakers {
		cfgs = append(cfgs, breakerConfig(b))
	}
	for _, inst := range instances {
		h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: service, Instance: inst, SDKVersion: "test",
			StartedAt: t0.Add(-time.Hour).UnixMilli(), Breakers: cfgs}
		if err := st.SaveHello(context.Background(), h, t0); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// send stores one transition of instance inst of service "checkout",
// from -> to at ms after t0, received at the same time.
func (l *agentLog) send(inst, breaker, from, to string, ms int64) cbdash.TransitionRecord {
	l.t.Helper()
	at := t0.Add(time.Duration(ms) * time.Millisecond)
	cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
	if to == protocol.StateClosed {
		cause = protocol.Cause{Kind: protocol.CauseProbesSucceeded}
	}
	tr := protocol.Transition{Breaker: breaker, From: from, To: to, At: at.UnixMilli(), Cause: cause}
	l.seq[inst]++
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: l.seq[inst], SentAt: at.UnixMilli(), Transitions: []protocol.Transition{tr}}
	if _, err := l.st.SaveBatch(context.Background(), "checkout", inst, t0.Add(-time.Hour).UnixMilli(), b, at); err != nil {
		l.t.Fatal(err)
	}
	return cbdash.TransitionRecord{Service: "checkout", Instance: inst, Transition: tr, ReceivedAt: at}
}

// runService runs an incident service on st and f until stop is called,
// which waits for Run to return.
func runService(t *testing.T, st incident.Store, f *feed, clk clock.Clock, margin time.Duration) (svc *incident.Service, stop func()) {
	t.Helper()
	svc, err := incident.NewService(incident.ServiceConfig{Source: f, Store: st, Clock: clk, Tick: time.Second, Margin: margin})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	return svc, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestTakeoverGivesTripsStoredWhileNoLeaderRanTheirIncidentOnce: a leader
// sees instance a of payments trip, opens the incident, and dies. While no
// leader runs, the store receives a's close, a trip and close of b (both
// under a second) and a short trip of another dependency, ledger. The next
// leader, starting 10 minutes later, gives payments' incident b and both
// opens and ends it at b's stored close (not at the takeover), and ledger
// its own incident ending at its stored close. A third start (a restart)
// replaying the same transitions changes nothing: each incident once. It
// runs in a synctest bubble: the 10 minutes without a leader are slept.
func TestTakeoverGivesTripsStoredWhileNoLeaderRanTheirIncidentOnce(t *testing.T) {
	synctest.Test(t, testTakeoverGivesTripsStoredWhileNoLeaderRanTheirIncidentOnce)
}

func testTakeoverGivesTripsStoredWhileNoLeaderRanTheirIncidentOnce(t *testing.T) {
	st := openStore(t)
	clk := clocktest.NewRunning()
	log := newAgentLog(t, st, "checkout", []string{"payments", "ledger"}, "a", "b")
	ctx := context.Background()

	f := &feed{ch: make(chan cbdash.Event)}
	_, stop := runService(t, st, f, clk, 0)
	trip := log.send("a", "payments", protocol.StateClosed, protocol.StateOpen, 1000)
	f.ch <- cbdash.Event{Kind: cbdash.EventTransition, At: trip.ReceivedAt, Transition: &trip}
	bubbletest.Settle()
	if l, err := st.Incidents(ctx, cbdash.IncidentQuery{}); err != nil || len(l) != 1 {
		t.Fatalf("the first leader stored %+v (%v), want the incident", l, err)
	}
	stop() // the leader is gone

	log.send("a", "payments", protocol.StateOpen, protocol.StateClosed, 2000)
	log.send("b", "payments", protocol.StateClosed, protocol.StateOpen, 3000)
	log.send("b", "payments", protocol.StateOpen, protocol.StateClosed, 3400)
	log.send("a", "ledger", protocol.StateClosed, protocol.StateOpen, 5000)
	log.send("a", "ledger", protocol.StateOpen, protocol.StateClosed, 5700)
	bubbletest.Advance(10 * time.Minute)

	want := []struct {
		breaker   string
		start     int64
		end       int64
		instances []string
		opens     int
	}{{"payments", 1000, 3400, []string{"a", "b"}, 2}, {"ledger", 5000, 5700, []string{"a"}, 1}}
	check := func(who string) {
		t.Helper()
		l, err := st.Incidents(ctx, cbdash.IncidentQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != len(want) {
			t.Fatalf("%s: %d incidents, want %d: %+v", who, len(l), len(want), l)
		}
		for _, w := range want {
			i := slices.IndexFunc(l, func(inc cbdash.Incident) bool { return inc.Breaker == w.breaker })
			if i < 0 {
				t.Fatalf("%s: no incident of %s: %+v", who, w.breaker, l)
			}
			inc := l[i]
			if inc.Open || !inc.Start.Equal(t0.Add(time.Duration(w.start)*time.Millisecond)) || !inc.End.Equal(t0.Add(time.Duration(w.end)*time.Millisecond)) ||
				!slices.Equal(inc.Instances, w.instances) || inc.Opens != w.opens {
				t.Errorf("%s: incident of %s = open %v %s..%s %v opens %d; want closed %dms..%dms %v opens %d", who, w.breaker, inc.Open,
					inc.Start.Sub(t0), inc.End.Sub(t0), inc.Instances, inc.Opens, w.start, w.end, w.instances, w.opens)
			}
		}
	}
	// The restart's margin reaches back over everything: a replay of
	// what was processed.
	for i, who := range []string{"the next leader", "a restart"} {
		bubbletest.Advance(time.Minute)
		f := &feed{ch: make(chan cbdash.Event)}
		start := clk.Now()
		_, stop := runService(t, st, f, clk, time.Duration(i*20)*time.Minute)
		bubbletest.Settle()
		if m, _, err := st.LeaderMark(ctx, incident.MarkName); err != nil || !m.Equal(start) {
			t.Fatalf("%s stored the mark %v (%v), want its start %v (a takeover)", who, m, err, start)
		}
		stop()
		check(who)
	}
}
