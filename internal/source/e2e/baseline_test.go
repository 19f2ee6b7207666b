package e2e_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/afex/hystrix-go/hystrix"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestHystrixGoBaselines starts cbdash in front of a real hystrix-go
// service whose commands have a history: GetCart tripped (open), ListCarts
// served calls within the rolling window (closed). At cbdash's first
// records, and again after a restart of cbdash on the same database, they
// show their states with no count, no transition and no incident (the
// first record used to count its rolling window as new calls); a trip
// after that is one transition and an incident.
func TestHystrixGoBaselines(t *testing.T) {
	const tripped, serving = "GetCart", "ListCarts"
	// hystrix-go's circuits are global, and a stream reports them all:
	// the other tests' streams are not to carry these.
	t.Cleanup(hystrix.Flush)
	for _, c := range []string{tripped, serving} {
		hystrix.ConfigureCommand(c, hystrix.CommandConfig{
			Timeout: 1000, MaxConcurrentRequests: 10, RequestVolumeThreshold: 5, SleepWindow: 60000, ErrorPercentThreshold: 50,
		})
	}
	sh := hystrix.NewStreamHandler()
	sh.Start()
	srv := httptest.NewServer(sh)
	t.Cleanup(func() {
		sh.Stop()
		srv.CloseClientConnections()
		srv.Close()
	})
	fail := func(command string) {
		if err := hystrix.Do(command, func() error { return errScripted }, nil); err != nil && !errors.Is(err, errScripted) && !errors.Is(err, hystrix.ErrCircuitOpen) {
			t.Fatalf("a failing call of %s returned %v", command, err)
		}
	}
	cb, _, err := hystrix.GetCircuit(tripped)
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, tripped+" open", func() bool {
		if cb.IsOpen() {
			return true
		}
		fail(tripped)
		return false
	})
	for range 3 {
		if err := hystrix.Do(serving, func() error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	fail(serving)
	// The history is in the stream before cbdash reads it.
	streamRecord(t, srv.URL+"/hystrix.stream", serving, func(r map[string]float64) bool {
		return r["rollingCountSuccess"] == 3 && r["rollingCountFailure"] == 1
	})

	clk := clocktest.NewRunning()
	path := storetest.Path(t)
	type run struct {
		st   *stacktest.Stack
		src  *source.Sources
		stop func()
	}
	start := func() *run {
		t.Helper()
		st := stacktest.Start(t, stacktest.Options{Path: path, Clock: clk, Collector: func(c *collector.Config) { c.StaleAfter = time.Minute }})
		inc, err := incident.NewService(incident.ServiceConfig{Source: st.Collector, Store: st.Store, Clock: clk, Tick: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		src, err := source.New(source.Config{Sink: st.Collector, Clock: clk, MaxBackoff: time.Second, Targets: []source.Target{{
			Kind: source.KindHystrix, URL: srv.URL + "/hystrix.stream", Service: "carts", Instance: "carts-1", Interval: source.Duration(3 * time.Second),
		}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = inc.Run(ctx) })
		wg.Go(func() { _ = src.Run(ctx) })
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); wg.Wait(); st.Stop() }) }
		t.Cleanup(stop)
		// Two records of each command.
		eventually.True(t, "the first records read", func() bool { return src.Status()[0].Reads >= 4 })
		return &run{st: st, src: src, stop: stop}
	}
	dep := func(r *run, command string) cbdash.Dependency {
		t.Helper()
		d, err := r.st.Collector.Dependency(cbdash.DependencyKey{Service: "carts", Breaker: command})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	history := func(r *run, command string) ([]cbdash.TransitionRecord, []cbdash.Incident) {
		t.Helper()
		trs, err := r.st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "carts", Breaker: command, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		incs, err := r.st.Store.Incidents(context.Background(), cbdash.IncidentQuery{Service: "carts", Breaker: command})
		if err != nil {
			t.Fatal(err)
		}
		return trs, incs
	}

	for _, name := range []string{"cbdash's first records", "after a restart of cbdash on the same database"} {
		t.Run(name, func(t *testing.T) {
			r := start()
			defer r.stop()
			for command, state := range map[string]string{tripped: protocol.StateOpen, serving: protocol.StateClosed} {
				d := dep(r, command)
				if d.State != state || d.Recent != (protocol.Counts{}) || d.OpensToday != 0 {
					t.Errorf("%s: state %q, counts %+v, opens today %d; want %q, none, 0", command, d.State, d.Recent, d.OpensToday, state)
				}
				if trs, incs := history(r, command); len(trs) != 0 || len(incs) != 0 {
					t.Errorf("%s: transitions %+v, incidents %+v; want none", command, trs, incs)
				}
			}
		})
	}

	r := start()
	defer r.stop()
	t.Run("a trip after the baseline is one transition and an incident", func(t *testing.T) {
		sc, _, err := hystrix.GetCircuit(serving)
		if err != nil {
			t.Fatal(err)
		}
		eventually.True(t, serving+" open", func() bool {
			if sc.IsOpen() {
				return true
			}
			fail(serving)
			return false
		})
		eventually.True(t, serving+" open on the dashboard with its incident", func() bool {
			trs, incs := history(r, serving) // the transition is stored after it is published
			return dep(r, serving).State == protocol.StateOpen && len(incs) == 1 && len(trs) > 0
		})
		trs, _ := history(r, serving)
		if len(trs) != 1 || trs[0].From != protocol.StateClosed || trs[0].To != protocol.StateOpen || trs[0].Cause.Kind != protocol.CauseLibraryRule {
			t.Errorf("transitions %+v, want one closed > open by hystrix-go's rule", trs)
		}
	})
}
