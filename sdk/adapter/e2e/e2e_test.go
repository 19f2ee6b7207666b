package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	cbfailsafe "github.com/cbdash/cbdash/sdk/adapter/failsafe"
	cbgobreaker "github.com/cbdash/cbdash/sdk/adapter/gobreaker"
	cbhystrix "github.com/cbdash/cbdash/sdk/adapter/hystrixgo"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

var errBoom = errors.New("boom")

var runs atomic.Int64

// server is a real collector on a SQLite file in t.TempDir(), served on
// 127.0.0.1.
type server struct {
	store *store.Store
	col   *collector.Collector
	url   string
	token string
}

func startServer(t *testing.T) *server {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cbdash.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	col, err := collector.New(collector.Config{Store: st, Registerer: prometheus.NewRegistry(), PublishInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// The agents' websocket, as internal/web mounts it.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/agent", func(w http.ResponseWriter, r *http.Request) {
		if err := col.ServeAgent(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector run: %v", err)
		}
		srv.Close()
		_ = st.Close()
	})
	return &server{store: st, col: col, url: "ws://" + ln.Addr().String() + "/api/v1/agent", token: token}
}

// startAgent starts a real agent for service "shop" with the sources.
func (s *server) startAgent(t *testing.T, sources ...agent.Source) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{URL: s.url, Token: s.token, Service: "shop", Instance: "shop-1",
		ReportInterval: 20 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range sources {
		if err := a.RegisterSource(src); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	eventually.True(t, "the agent to connect", func() bool { return a.Stats().Connected })
	return a
}

// transitions returns the stored transitions of shop/breaker, oldest
// first, as "from>to:cause".
func (s *server) transitions(t *testing.T, breaker string) []string {
	t.Helper()
	recs, err := s.store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "shop", Breaker: breaker,
		From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[len(recs)-1-i] = r.From + ">" + r.To + ":" + r.Cause.Kind
	}
	return out
}

func (s *server) recent(t *testing.T, breaker string) protocol.Counts {
	t.Helper()
	d, err := s.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: breaker})
	if err != nil {
		return protocol.Counts{}
	}
	return d.Recent
}

func (s *server) waitTransitions(t *testing.T, breaker string, want ...string) {
	t.Helper()
	eventually.True(t, breaker+" transitions "+strings.Join(want, ", "), func() bool { return len(s.transitions(t, breaker)) >= len(want) })
	if got := s.transitions(t, breaker); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stored transitions of %s = %v, want %v", breaker, got, want)
	}
}

func (s *server) waitCounts(t *testing.T, breaker string, want protocol.Counts) {
	t.Helper()
	eventually.True(t, breaker+" counts", func() bool { return s.recent(t, breaker) == want })
}

func TestGobreakerThroughOpenAndBackToClosed(t *testing.T) {
	s := startServer(t)
	const openFor = 250 * time.Millisecond // gobreaker runs on the system clock: waited out by polling its state
	cb := cbgobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "search", MaxRequests: 2, Timeout: openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 }}, cbgobreaker.Options{})
	two := cbgobreaker.NewTwoStepCircuitBreaker[int](gobreaker.Settings{Name: "ledger"}, cbgobreaker.Options{})
	s.startAgent(t, cb, two)

	call := func(err error) error {
		_, e := cb.Execute(func() (int, error) { return 1, err })
		return e
	}
	_ = call(nil)
	for range 3 {
		_ = call(errBoom)
	}
	if err := call(nil); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("call while open: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for cb.Breaker().State() != gobreaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("gobreaker did not half-open")
		}
		runtime.Gosched()
	}
	_ = call(nil)
	_ = call(nil)
	done, err := two.Allow()
	if err != nil {
		t.Fatal(err)
	}
	done(errBoom)

	s.waitTransitions(t, "search", "closed>open:library_rule", "open>half_open:open_elapsed", "half_open>closed:probes_succeeded")
	s.waitCounts(t, "search", protocol.Counts{Admitted: 6, Successes: 3, Failures: 3, Errors: 3, RejectedOpen: 1})
	s.waitCounts(t, "ledger", protocol.Counts{Admitted: 1, Failures: 1, Errors: 1})

	d, err := s.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: "search"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.PerInstance[0].Config
	if cfg.Library != cbgobreaker.Library || !cfg.HoldsUnsupported || cfg.Settings.Map()["Timeout"] != "250ms" {
		t.Errorf("the collector has config %+v", cfg)
	}

	// gobreaker cannot be held: the collector refuses the hold up front,
	// naming why (the agent would refuse it too).
	_, err = s.col.Issue(context.Background(), cbdash.Actor{Name: "ops"}, cbdash.CommandRequest{Service: "shop", Breaker: "search",
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", Actor: "ops"})
	if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "cannot be held open or closed") {
		t.Errorf("force open of a gobreaker breaker: %v, want refused: cannot be held open or closed", err)
	}
}

func TestFailsafeThroughOpenAndBackToClosedAndObeysAForceOpenHold(t *testing.T) {
	s := startServer(t)
	cb := cbfailsafe.New("payments", circuitbreaker.NewBuilder[int]().WithFailureThresholdRatio(3, 4).
		WithSuccessThreshold(2).WithDelay(0), cbfailsafe.Options{})
	s.startAgent(t, cb)
	ctx := context.Background()
	call := func(err error) error {
		_, e := cb.Get(ctx, func(context.Context) (int, error) { return 1, err })
		return e
	}
	for _, err := range []error{nil, errBoom, errBoom, errBoom, nil, nil} {
		_ = call(err)
	}
	s.waitTransitions(t, "payments", "closed>open:failure_rate", "open>half_open:open_elapsed", "half_open>closed:probes_succeeded")
	s.waitCounts(t, "payments", protocol.Counts{Admitted: 6, Successes: 3, Failures: 3, Errors: 3})

	cmd, err := s.col.Issue(ctx, cbdash.Actor{Name: "ops"}, cbdash.CommandRequest{Service: "shop", Breaker: "payments",
		Action: protocol.ActionForceOpen, TTL: time.Hour, Reason: "failover drill", Actor: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the hold to be applied", func() bool {
		c, err := s.store.Command(ctx, cmd.ID)
		return err == nil && c.Targets[0].Status == cbdash.TargetApplied
	})
	for range 4 {
		if err := call(nil); !errors.Is(err, cbfailsafe.ErrHeldOpen) {
			t.Fatalf("call while held open: %v", err)
		}
	}
	s.waitTransitions(t, "payments", "closed>open:failure_rate", "open>half_open:open_elapsed",
		"half_open>closed:probes_succeeded", "closed>forced_open:command")
	s.waitCounts(t, "payments", protocol.Counts{Admitted: 6, Successes: 3, Failures: 3, Errors: 3, RejectedForced: 4})
	d, err := s.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if d.State != protocol.StateForcedOpen || d.PerInstance[0].Config.HoldsUnsupported || d.PerInstance[0].Config.FailureRateThreshold != 75 {
		t.Errorf("dependency = state %q, config %+v", d.State, d.PerInstance[0].Config)
	}
}

// A hystrix-go command through the adapter, registered with a real agent
// by one call, reaches a real collector with hystrix-go's exact counts
// (its successes, failures, short-circuits and fallbacks) and both its
// transitions; it cannot be held. hystrix-go runs on the system clock:
// its SleepWindow is waited out by calling until the test call passes.
func TestHystrixGoThroughOpenAndBackToClosedWithExactCounts(t *testing.T) {
	s := startServer(t)
	a := s.startAgent(t)
	ad := cbhystrix.Register(a, cbhystrix.Options{PollInterval: 20 * time.Millisecond})
	t.Cleanup(ad.Close)
	command := fmt.Sprintf("users-%d", runs.Add(1)) // a new circuit for each run (-count)
	hystrix.ConfigureCommand(command, hystrix.CommandConfig{Timeout: 5000, RequestVolumeThreshold: 5,
		SleepWindow: 100, ErrorPercentThreshold: 50})
	var want protocol.Counts // as the callers saw them
	do := func(err error) error {
		err = hystrix.Do(command, func() error { return err }, nil)
		switch {
		case errors.Is(err, hystrix.ErrCircuitOpen):
			want.RejectedOpen++
		case err != nil:
			want.Admitted++
			want.Failures++
			want.Errors++
		default:
			want.Admitted++
			want.Successes++
		}
		return err
	}
	for _, err := range []error{nil, nil, errBoom, errBoom, errBoom, errBoom, errBoom} {
		_ = do(err)
	}
	// hystrix-go counts the calls on a goroutine of its own: once it has,
	// asking the circuit (as the adapter's poll does) opens it, and a call
	// with a fallback is short-circuited into it.
	eventually.True(t, "hystrix-go to open the circuit", func() bool {
		cb, _, err := hystrix.GetCircuit(command)
		return err == nil && cb.IsOpen()
	})
	fellBack := false
	_ = hystrix.Do(command, func() error { return nil }, func(err error) error {
		fellBack = errors.Is(err, hystrix.ErrCircuitOpen)
		return nil
	})
	if !fellBack {
		t.Fatal("the call after the circuit opened was not short-circuited into its fallback")
	}
	want.RejectedOpen++
	want.FallbackSuccess++
	eventually.True(t, "hystrix-go's test call after its SleepWindow", func() bool { return do(nil) == nil })
	s.waitTransitions(t, command, "closed>open:library_rule", "open>closed:probes_succeeded")
	if !eventually.Wait(eventually.Timeout, func() bool { return s.recent(t, command) == want }) {
		t.Fatalf("the collector has counts %+v, want %+v (as the callers saw them)", s.recent(t, command), want)
	}

	d, err := s.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: command})
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.PerInstance[0].Config
	if cfg.Library != cbhystrix.Library || !cfg.HoldsUnsupported || cfg.Settings.Map()["SleepWindow"] != "100ms" || cfg.FailureRateThreshold != 50 {
		t.Errorf("the collector has config %+v", cfg)
	}
	_, err = s.col.Issue(context.Background(), cbdash.Actor{Name: "ops"}, cbdash.CommandRequest{Service: "shop", Breaker: command,
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", Actor: "ops"})
	if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "cannot be held open or closed") {
		t.Errorf("force open of a hystrix-go command: %v, want refused: cannot be held open or closed", err)
	}
}
