// Command checkout is a small real Go service wired with cbdash: every
// call it makes to its payments dependency goes through a circuit breaker
// (sdk/breaker's http.RoundTripper), and an agent (sdk/agent) reports the
// breaker to a cbdash server, which can also trip it from the dashboard.
//
//	cbdash token create --service checkout          # on the server: an agent token
//	CBDASH_AGENT_TOKEN=... PAYMENTS_URL=http://127.0.0.1:9000 go run ./examples/checkout
//	curl http://127.0.0.1:8081/checkout
//	curl http://127.0.0.1:8081/readyz     # the breakers, for the load balancer
//
// Environment: CBDASH_AGENT_URL (default ws://127.0.0.1:8080/api/v1/agent),
// CBDASH_AGENT_TOKEN, PAYMENTS_URL (default http://127.0.0.1:9000),
// ADDR (default 127.0.0.1:8081).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/health"
)

func main() {
	if err := run(context.Background(), os.Getenv, slog.New(slog.NewTextHandler(os.Stderr, nil)), nil); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// run serves until SIGINT/SIGTERM or ctx ends. ready, if not nil, gets
// the address the service listens on.
func run(ctx context.Context, getenv func(string) string, log *slog.Logger, ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The cbdash part: an agent, and an HTTP client whose transport puts a
	// breaker named "payments" in front of the payments service.
	a, err := agent.New(agent.Config{
		URL:     or(getenv("CBDASH_AGENT_URL"), "ws://127.0.0.1:8080/api/v1/agent"),
		Token:   getenv("CBDASH_AGENT_TOKEN"),
		Service: "checkout",
		Labels:  map[string]string{"version": "1.0.0"},
		Logger:  log,
	})
	if err != nil {
		return err
	}
	// The readiness endpoint reports the breakers without the load
	// balancer trap: payments is not critical (checkout accepts the order
	// and defers the charge when it is down), so its open breaker makes
	// checkout degraded (200), never out of rotation.
	readiness := health.New()
	payments := &http.Client{Transport: breaker.NewTransport(nil, breaker.TransportConfig{
		Config:     breaker.Config{FailureRateThreshold: 50, OpenDuration: 10 * time.Second, CallTimeout: 2 * time.Second},
		BreakerFor: func(*http.Request) string { return "payments" },
		// A breaker the agent cannot report still guards the calls; say
		// why it is missing from the dashboard (for example more breakers
		// than the agent may declare).
		OnNew: func(b *breaker.Breaker) {
			_ = readiness.Add(b, health.NonCritical) // an error: added already
			if err := a.Register(b); err != nil {
				log.Error("breaker not reported to cbdash", "breaker", b.Name(), "error", err)
			}
		},
		// With BreakerFor keyed by host, idle per-host breakers are evicted
		// (TransportConfig.MaxBreakers, IdleTimeout): stop reporting them.
		OnEvict: func(b *breaker.Breaker) {
			if err := a.Unregister(b); err != nil {
				log.Warn("evicted breaker not unregistered", "breaker", b.Name(), "error", err)
			}
		},
	})}
	if err := a.Start(); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = a.Close(cctx) // flush what the collector has not acknowledged yet
	}()

	paymentsURL := or(getenv("PAYMENTS_URL"), "http://127.0.0.1:9000")
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", readiness)
	mux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) {
		checkout(w, r, payments, paymentsURL)
	})
	ln, err := net.Listen("tcp", or(getenv("ADDR"), "127.0.0.1:8081"))
	if err != nil {
		return err
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("checkout is serving", "addr", ln.Addr().String(), "payments", paymentsURL)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkout charges the payment; when the breaker is open or payments
// fails, it accepts the order and defers the charge (the fallback).
func checkout(w http.ResponseWriter, r *http.Request, payments *http.Client, paymentsURL string) {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, paymentsURL+"/charge", nil)
	resp, err := payments.Do(req)
	if err == nil {
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode < 500 {
			fmt.Fprintf(w, "order placed, payment %d\n", resp.StatusCode)
			return
		}
	}
	if errors.Is(err, breaker.ErrRejected) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "order accepted, payment deferred: payments breaker is open")
		return
	}
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintln(w, "order accepted, payment deferred: payments failed")
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
