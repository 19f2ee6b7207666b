package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/stacktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collectorOnLoopback runs the server stack on 127.0.0.1 and returns its
// agent URL, an agent token, and the collector. It runs on the system
// clock: the example is a real service whose agent and breaker read the
// wall clock (as every service does), and the collector refuses
// transitions from the future of its own clock.
func collectorOnLoopback(t *testing.T) (string, string, *collector.Collector) {
	t.Helper()
	s := stacktest.Start(t, stacktest.Options{Clock: clock.System()})
	return s.AgentURL(), s.AgentToken, s.Collector
}

func TestExampleBreakerOpensAndReachesTheCollector(t *testing.T) {
	agentURL, token, col := collectorOnLoopback(t)
	snapshot, events, unsubscribe := col.Subscribe()
	defer unsubscribe()
	// A payments service that is down: every charge fails with a 500.
	payments := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go payments.Serve(pln)
	defer payments.Close()

	env := map[string]string{
		"CBDASH_AGENT_URL": agentURL, "CBDASH_AGENT_TOKEN": token,
		"PAYMENTS_URL": "http://" + pln.Addr().String(), "ADDR": "127.0.0.1:0",
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.DiscardHandler), ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("checkout stopped: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("checkout: %v", err)
		}
	}()

	// The breaker's defaults: at least 10 calls, then a failure rate of
	// 50 % opens it. After that, checkout answers from its fallback.
	var last string
	for i := 0; i < 20; i++ {
		resp, err := http.Get("http://" + addr + "/checkout")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("checkout answered %d %q, want 202 (payment deferred)", resp.StatusCode, b)
		}
		last = string(b)
	}
	if !strings.Contains(last, "breaker is open") {
		t.Fatalf("after 20 failed charges checkout says %q, want the open breaker's fallback", last)
	}
	// Its readiness stays 200: payments is not critical, checkout is only
	// degraded (sdk/breaker/health: no load-balancer trap).
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"status":"degraded"`) || !strings.Contains(string(b), `"degraded":["payments"]`) {
		t.Fatalf("readyz with payments open: %d %s, want 200 degraded naming payments", resp.StatusCode, b)
	}

	// The collector tells its subscribers of every change: wait for the one
	// that shows the breaker open, or give up after 10 s.
	key := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	giveUp := time.After(10 * time.Second)
	for {
		if isOpen(snapshot, key) {
			return
		}
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the collector dropped the test's subscription")
			}
			if ev.Dependency != nil {
				snapshot = []cbdash.Dependency{*ev.Dependency}
			} else {
				snapshot = nil
			}
		case <-giveUp:
			d, err := col.Dependency(key)
			t.Fatalf("the collector does not see checkout/payments open within 10s: %+v, %v", d, err)
		}
	}
}

// isOpen reports whether ds shows the dependency key open.
func isOpen(ds []cbdash.Dependency, key cbdash.DependencyKey) bool {
	for _, d := range ds {
		if d.DependencyKey == key && d.State == "open" {
			return true
		}
	}
	return false
}
