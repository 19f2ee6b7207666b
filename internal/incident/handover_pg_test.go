package incident_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// webhookLog is a webhook receiver keeping the generic JSON bodies.
type webhookLog struct {
	mu   sync.Mutex
	msgs []alert.Message
}

func (w *webhookLog) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m alert.Message
	if err := json.Unmarshal(body, &m); err == nil {
		w.mu.Lock()
		w.msgs = append(w.msgs, m)
		w.mu.Unlock()
	}
	rw.WriteHeader(http.StatusNoContent)
}

func (w *webhookLog) all() []alert.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// TestLeaderDiesAmidShortTripsEachGetsItsIncidentAndAlertOnce runs two
// collector stacks over one PostgreSQL, each with an incident and an alert
// service that run only while it leads them (cluster.Bus.Lead, as
// cbdash serve does). Ten breakers of checkout each trip and close again
// within a second: four through collector A while it leads, one opening
// before A's lock connections are terminated (pg_terminate_backend, the
// leader gone abruptly) and closing after, and five through collector B,
// which takes over within its lock retry. Each trip has one incident and
// one alert firing and one resolve, however the takeover fell; each
// incident ends at its stored close.
func TestLeaderDiesAmidShortTripsEachGetsItsIncidentAndAlertOnce(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn := storetest.Postgres(t) // migrated: the bus opens before the stores
	clk := clocktest.NewRunning()
	ctx := context.Background()
	openBus := func(node string, reconnect time.Duration) *cluster.Postgres {
		b, err := cluster.Open(ctx, cluster.Config{URL: dsn, NodeID: node, Clock: clk, Reconnect: reconnect,
			LeaderRetry: 200 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	// A does not come back for the lock within the test: B takes over.
	busA, busB := openBus("hoa", time.Minute), openBus("hob", 200*time.Millisecond)
	stackA := stacktest.Start(t, stacktest.Options{Path: dsn, Clock: clk, Collector: func(c *collector.Config) { c.Cluster = busA }})
	stackB := stacktest.Start(t, stacktest.Options{Path: dsn, Clock: clk, Collector: func(c *collector.Config) { c.Cluster = busB }})

	hooks := &webhookLog{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	if _, err := stackA.Store.CreateAlertRule(ctx, cbdash.AlertRule{Name: "checkout open", Service: "checkout", Kind: cbdash.AlertOpen,
		Hold: time.Second, WebhookURL: srv.URL}); err != nil {
		t.Fatal(err)
	}

	leadCtx, stopLeading := context.WithCancel(ctx)
	var leaders sync.WaitGroup
	t.Cleanup(func() { stopLeading(); leaders.Wait() })
	lead := func(bus *cluster.Postgres, st *stacktest.Stack) {
		// HANDOVER_DEBUG=1 logs what both nodes' services do (to read a failure).
		lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", bus.NodeID())
		if os.Getenv("HANDOVER_DEBUG") == "" {
			lg = nil
		}
		inc, err := incident.NewService(incident.ServiceConfig{Logger: lg, Source: st.Collector, Store: st.Store, Clock: clk, Tick: 100 * time.Millisecond,
			Detector: incident.Config{Quiet: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		al, err := alert.New(alert.Config{Logger: lg, Source: st.Collector, Store: st.Store, Clock: clk, Interval: 100 * time.Millisecond,
			Delivery: alert.DeliveryConfig{AllowPrivate: true, Attempts: 3, Backoff: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		for name, run := range map[string]func(context.Context) error{"incidents": inc.Run, "alerts": al.Run} {
			leaders.Go(func() {
				_ = bus.Lead(leadCtx, name, func(lctx context.Context) {
					if err := run(lctx); err != nil {
						t.Errorf("%s on %s: %v", name, bus.NodeID(), err)
					}
				})
			})
		}
	}
	lead(busA, stackA)
	eventually.True(t, "A leading incidents and alerts", func() bool { return busA.Leading("incidents") && busA.Leading("alerts") })
	lead(busB, stackB)

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
		now := clk.Now().UnixMilli()
		b := protocol.Batch{Type: protocol.TypeBatch, Seq: a.seq, SentAt: now, Transitions: ts}
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
	opened, closed := map[string]int64{}, map[string]int64{}
	open := func(inst string, k int) {
		tr := trans(k, protocol.StateClosed, protocol.StateOpen)
		opened[tr.Breaker] = tr.At
		send(inst, tr)
	}
	closeTrip := func(inst string, k int) {
		tr := trans(k, protocol.StateOpen, protocol.StateClosed)
		closed[tr.Breaker] = tr.At
		send(inst, tr)
	}
	send("i0")
	send("i1")

	for k := range 4 {
		open("i0", k)
		closeTrip("i0", k)
	}
	open("i0", 4)
	eventually.True(t, "A to open b4's incident", func() bool {
		l, _ := stackA.Store.Incidents(ctx, cbdash.IncidentQuery{Breaker: "b4", OpenOnly: true})
		return len(l) == 1
	})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	killed := time.Now() // real time: the lock moves on the database's time
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'cbdash-lead-%-hoa%'`).Scan(&n); err != nil || n < 2 {
		t.Fatalf("terminated %d lock connections of A (%v), want its incidents and alerts ones at least", n, err)
	}
	closeTrip("i0", 4)
	for k := 5; k < trips; k++ {
		open("i1", k)
		closeTrip("i1", k)
	}
	eventually.True(t, "B leading incidents and alerts", func() bool { return busB.Leading("incidents") && busB.Leading("alerts") })
	t.Logf("B leads %v after A's lock connections were terminated (real time)", time.Since(killed))

	settled := eventually.Wait(30*time.Second, func() bool {
		open, err := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{OpenOnly: true})
		if err != nil || len(open) != 0 {
			return false
		}
		all, err := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{Limit: 1000})
		if err != nil || len(all) < trips {
			return false
		}
		kept, err := stackB.Store.FiringAlerts(ctx)
		return err == nil && len(kept) == 0 && len(hooks.all()) >= 2*trips
	})
	if !settled {
		all, _ := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{Limit: 1000})
		kept, _ := stackB.Store.FiringAlerts(ctx)
		t.Fatalf("not settled after 30 s: incidents %+v\nkept alerts %+v\nwebhook calls %+v", all, kept, hooks.all())
	}

	all, err := stackB.Store.Incidents(ctx, cbdash.IncidentQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != trips {
		t.Errorf("%d incidents, want %d (one per trip): %+v", len(all), trips, all)
	}
	for _, inc := range all {
		start, end := opened[inc.Breaker], closed[inc.Breaker]
		if inc.Opens != 1 || inc.Start.UnixMilli() != start || inc.End.UnixMilli() != end {
			t.Errorf("incident of %s: %d opens, %d..%d ms; want 1 open, %d..%d (the stored trip and close)",
				inc.Breaker, inc.Opens, inc.Start.UnixMilli(), inc.End.UnixMilli(), start, end)
		}
	}
	calls := map[string]int{}
	for _, m := range hooks.all() {
		calls[m.Event+" "+m.Subject]++
		if want := opened[m.Breaker]; m.Since.UnixMilli() != want {
			t.Errorf("%s %s since %d, want the trip's time %d", m.Event, m.Subject, m.Since.UnixMilli(), want)
		}
	}
	for k := range trips {
		for _, ev := range []string{cbdash.AlertFiring, cbdash.AlertResolved} {
			if key := fmt.Sprintf("%s checkout/b%d", ev, k); calls[key] != 1 {
				t.Errorf("%d webhook calls %q, want 1", calls[key], key)
			}
		}
	}
	if len(hooks.all()) != 2*trips {
		t.Errorf("%d webhook calls, want %d: %v", len(hooks.all()), 2*trips, calls)
	}
}
