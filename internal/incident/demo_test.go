package incident_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/demo"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestDemoFaultScriptIncidents runs one loop of the demo's fault script,
// four times faster (script, latencies and breaker timings all scaled by
// 1/4), against two real instances with real breakers and agents reporting
// to a real collector on loopback; the incident Service watches the
// collector live. The incidents it stores must agree with the transitions
// the store recorded: each starts at a trip, ends at the last close, holds
// the instances that were down, and every trip belongs to an incident.
//
// It exercises real time on purpose (real breakers trip on real HTTP
// answers), so every part runs on one clock that starts at the test epoch
// and advances at real speed.
func TestDemoFaultScriptIncidents(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for about 20 s")
	}
	const k = 0.25
	quiet := 2 * time.Second
	clk := clocktest.NewRunning()
	stack := stacktest.Start(t, stacktest.Options{Clock: clk, Collector: func(c *collector.Config) {
		c.PublishInterval, c.StaleAfter, c.SubscriberBuffer = 100*time.Millisecond, 2*time.Second, 1024
	}})
	col, st := stack.Collector, stack.Store
	svc, err := incident.NewService(incident.ServiceConfig{Source: col, Store: st, Clock: clk, Detector: incident.Config{Quiet: quiet}, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	bc := demo.BreakerConfig()
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * k) }
	bc.SlowCallDuration, bc.OpenDuration, bc.CallTimeout = scale(bc.SlowCallDuration), scale(bc.OpenDuration), scale(bc.CallTimeout)
	bc.OpenBackoff = breaker.Backoff{Multiplier: bc.OpenBackoff.Multiplier, Max: scale(bc.OpenBackoff.Max)}
	script := demo.DefaultScript().Scaled(k)
	started := clk.Now()
	fleet, err := demo.StartFleet(demo.FleetConfig{
		CollectorURL: stack.AgentURL(), Token: stack.AgentToken, Clock: clk,
		Script:       script,
		Dependencies: []demo.DependencySpec{{Name: "payments", Offset: scale(4 * time.Second)}},
		Services:     []demo.ServiceSpec{{Name: "checkout", Instances: 2, Dependencies: []string{"payments"}}},
		Rate:         60, Breaker: &bc, ReportInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	// One loop of the script, then until every breaker is closed again
	// (real time: the script's).
	eventually.Within(t, script.Period()+20*time.Second, "every breaker closed after one loop of the script", func() bool {
		d, err := col.Dependency(key)
		return clk.Now().Sub(started) > script.Period() && err == nil && d.ByState[protocol.StateClosed] == 2
	})
	stop, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := fleet.Close(stop); err != nil {
		t.Logf("closing the fleet: %v", err)
	}
	stopCancel()
	list := func(q cbdash.IncidentQuery) []cbdash.Incident {
		l, err := st.Incidents(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	eventually.True(t, "every incident to close", func() bool { return len(list(cbdash.IncidentQuery{OpenOnly: true})) == 0 })
	incs := list(cbdash.IncidentQuery{})
	slices.Reverse(incs) // oldest first
	trs, err := st.Transitions(context.Background(), cbdash.TransitionQuery{Service: key.Service, Breaker: key.Breaker, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(trs)
	if len(incs) == 0 {
		t.Fatalf("no incident; transitions: %v", trs)
	}
	var opens int
	for _, tr := range trs {
		if tr.To == protocol.StateOpen {
			opens++
		}
	}
	t.Logf("%d transitions (%d to open), %d incidents", len(trs), opens, len(incs))

	at := func(tr cbdash.TransitionRecord) time.Time { return time.UnixMilli(tr.At).UTC() }
	down := func(s string) bool {
		return s == protocol.StateOpen || s == protocol.StateHalfOpen || s == protocol.StateForcedOpen
	}
	for i, inc := range incs {
		t.Logf("incident %d: %s .. %s (%s), instances %v, opens %d, first %s: %s", inc.ID, inc.Start.Format("15:04:05.000"),
			inc.End.Format("15:04:05.000"), inc.End.Sub(inc.Start), inc.Instances, inc.Opens, inc.FirstInstance, incident.CauseText(inc.FirstCause))
		var in []cbdash.TransitionRecord
		for _, tr := range trs {
			if !at(tr).Before(inc.Start) && !at(tr).After(inc.End) {
				in = append(in, tr)
			}
		}
		if len(in) == 0 || at(in[0]) != inc.Start || in[0].To != protocol.StateOpen || in[0].Instance != inc.FirstInstance {
			t.Errorf("incident %d does not start at a stored trip of %s: %+v", inc.ID, inc.FirstInstance, in)
			continue
		}
		last := in[len(in)-1]
		if at(last) != inc.End || down(last.To) {
			t.Errorf("incident %d does not end at the last stored close: ends %s, last transition %+v", inc.ID, inc.End, last)
		}
		var insts []string
		var nOpens int
		for _, tr := range in {
			if down(tr.To) && !slices.Contains(insts, tr.Instance) {
				insts = append(insts, tr.Instance)
			}
			if tr.To == protocol.StateOpen {
				nOpens++
			}
		}
		slices.Sort(insts)
		if !slices.Equal(insts, inc.Instances) || nOpens != inc.Opens {
			t.Errorf("incident %d: instances %v opens %d; stored transitions say %v and %d", inc.ID, inc.Instances, inc.Opens, insts, nOpens)
		}
		if i > 0 && inc.Start.Sub(incs[i-1].End) < quiet {
			t.Errorf("incidents %d and %d are %s apart, less than the quiet period: they should have merged", incs[i-1].ID, inc.ID, inc.Start.Sub(incs[i-1].End))
		}
		rep, err := incident.Build(context.Background(), st, inc, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		md := string(incident.Markdown(rep))
		pos := 0
		for _, tr := range in {
			row := "| " + at(tr).Format("15:04:05.000") + " | "
			j := strings.Index(md[pos:], row)
			if j < 0 {
				t.Errorf("incident %d: the Markdown timeline lacks, in order, the transition of %s at %s:\n%s", inc.ID, tr.Instance, at(tr).Format("15:04:05.000"), md)
				break
			}
			pos += j + len(row)
		}
		if rep.Summary.CallsRejected == 0 || rep.Summary.FallbacksServed == 0 {
			t.Errorf("incident %d: no rejections or fallbacks in the summary: %+v", inc.ID, rep.Summary)
		}
	}
	for _, tr := range trs {
		if tr.To != protocol.StateOpen {
			continue
		}
		if !slices.ContainsFunc(incs, func(inc cbdash.Incident) bool { return !at(tr).Before(inc.Start) && !at(tr).After(inc.End) }) {
			t.Errorf("the trip of %s at %s belongs to no incident", tr.Instance, at(tr))
		}
	}
}
