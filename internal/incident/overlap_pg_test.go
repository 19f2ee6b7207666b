package incident_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestTwoLeadersAtOnceMakeEachIncidentAndAlertOnce is the overlap of two
// leaders, made to last: two collector stacks over one PostgreSQL
// database, joined by their bus (each sees the other's transitions), both
// run the incident and the alert services for the whole test, as two
// leaders would while a leader that lost its lock has not noticed yet
// (docs/scaling.md: up to LeaderCheck). Ten breakers trip and close
// again, five through each collector: each trip has one incident, one
// alert firing and one resolve delivered, whichever leader records them.
func TestTwoLeadersAtOnceMakeEachIncidentAndAlertOnce(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn := storetest.Postgres(t)
	clk := clocktest.NewRunning()
	ctx := context.Background()
	openBus := func(node string) *cluster.Postgres {
		b, err := cluster.Open(ctx, cluster.Config{URL: dsn, NodeID: node, Clock: clk,
			LeaderRetry: 200 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	busA, busB := openBus("ova"), openBus("ovb")
	stackA := stacktest.Start(t, stacktest.Options{Path: dsn, Clock: clk, Collector: func(c *collector.Config) { c.Cluster = busA }})
	stackB := stacktest.Start(t, stacktest.Options{Path: dsn, Clock: clk, Collector: func(c *collector.Config) { c.Cluster = busB }})
	hooks := &webhookLog{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	if _, err := stackA.Store.CreateAlertRule(ctx, cbdash.AlertRule{Name: "checkout open", Service: "checkout", Kind: cbdash.AlertOpen,
		Hold: time.Second, WebhookURL: srv.URL}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	t.Cleanup(func() { stop(); running.Wait() })
	for _, st := range []*stacktest.Stack{stackA, stackB} {
		inc, err := incident.NewService(incident.ServiceConfig{Source: st.Collector, Store: st.Store, Clock: clk, Tick: 100 * time.Millisecond,
			Detector: incident.Config{Quiet: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		al, err := alert.New(alert.Config{Source: st.Collector, Store: st.Store, Clock: clk, Interval: 100 * time.Millisecond,
			Delivery: alert.DeliveryConfig{AllowPrivate: true, Attempts: 3, Backoff: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range []func(context.Context) error{inc.Run, al.Run} {
			running.Go(func() {
				if err := run(runCtx); err != nil {
					t.Errorf("run: %v", err)
				}
			})
		}
	}

	const trips = 10
	var breakers []protocol.BreakerConfig
	for k := range trips {
		breakers = append(breakers, protocol.BreakerConfig{Name: fmt.Sprintf("b%d", k), WindowKind: "count", WindowSize: 100,
			FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1})
	}
	type agent struct {
		col   *collector.Collector
		hello protocol.Hello
		seq   uint64
	}
	agents := map[string]*agent{"i0": {col: stackA.Collector}, "i1": {col: stackB.Collector}}
	for inst, a := range agents {
		a.hello = protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: inst, SDKVersion: "test",
			StartedAt: clk.Now().UnixMilli(), Breakers: breakers}
	}
	send := func(inst string, ts ...protocol.Transition) {
		t.Helper()
		a := agents[inst]
		a.seq++
		b := protocol.Batch{Type: protocol.TypeBatch, Seq: a.seq, SentAt: clk.Now().UnixMilli(), Transitions: ts}
		if _, err := a.col.Ingest(ctx, &a.hello, &b); err != nil {
			t.Fatalf("ingest %s seq %d: %v", inst, a.seq, err)
		}
	}
	gen := uint64(0)
	trans := func(k int, from, to string) protocol.Transition {
		gen++
		cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
		if to == protocol.StateClosed {
			cause = protocol.Cause{Kind: protocol.CauseProbesSucceeded}
		}
		return protocol.Transition{Breaker: fmt.Sprintf("b%d", k), From: from, To: to, At: clk.Now().UnixMilli(), Generation: gen, Cause: cause}
	}
	send("i0")
	send("i1")
	eventually.True(t, "each collector sees both instances", func() bool {
		for _, st := range []*stacktest.Stack{stackA, stackB} {
			d, err := st.Collector.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "b0"})
			if err != nil || d.Instances != 2 {
				return false
			}
		}
		return true
	})
	opened := map[string]int64{}
	for k := range trips {
		inst := "i0"
		if k >= trips/2 {
			inst = "i1"
		}
		tr := trans(k, protocol.StateClosed, protocol.StateOpen)
		opened[tr.Breaker] = tr.At
		send(inst, tr)
		// Open long enough for both leaders' ticks and the alert's hold.
		eventually.True(t, fmt.Sprintf("b%d's alert firing", k), func() bool {
			for _, m := range hooks.all() {
				if m.Event == cbdash.AlertFiring && m.Breaker == tr.Breaker {
					return true
				}
			}
			return false
		})
		send(inst, trans(k, protocol.StateOpen, protocol.StateClosed))
	}

	settled := eventually.Wait(30*time.Second, func() bool {
		open, err := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{OpenOnly: true})
		if err != nil || len(open) != 0 {
			return false
		}
		kept, err := stackB.Store.FiringAlerts(ctx)
		return err == nil && len(kept) == 0 && len(hooks.all()) >= 2*trips
	})
	if !settled {
		all, _ := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{Limit: 1000})
		t.Fatalf("not settled after 30 s: incidents %+v\nwebhook calls %+v", all, hooks.all())
	}
	all, err := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, inc := range all {
		per[inc.Breaker]++
		if inc.Start.UnixMilli() != opened[inc.Breaker] {
			t.Errorf("incident of %s starts %d, want its trip %d", inc.Breaker, inc.Start.UnixMilli(), opened[inc.Breaker])
		}
	}
	calls := map[string]int{}
	for _, m := range hooks.all() {
		calls[m.Event+" "+m.Subject]++
	}
	for k := range trips {
		b := fmt.Sprintf("b%d", k)
		if per[b] != 1 {
			t.Errorf("%d incidents of %s, want 1", per[b], b)
		}
		for _, ev := range []string{cbdash.AlertFiring, cbdash.AlertResolved} {
			if key := fmt.Sprintf("%s checkout/%s", ev, b); calls[key] != 1 {
				t.Errorf("%d webhook calls %q, want 1", calls[key], key)
			}
		}
	}
	t.Logf("%d incidents, %d webhook calls, from two leaders running at once", len(all), len(hooks.all()))
}
