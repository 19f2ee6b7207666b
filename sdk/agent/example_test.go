package agent_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// A service reports its breakers to the collector: one agent per process,
// every breaker registered with it, closed on shutdown so that the last
// reports are flushed.
func Example() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	a, err := agent.New(agent.Config{
		URL:     "ws://127.0.0.1:8080/api/v1/agent",
		Token:   os.Getenv("CBDASH_AGENT_TOKEN"),
		Service: "checkout",
		Labels:  map[string]string{"region": "eu-west-1", "version": "1.4.2"},
		Logger:  log,
	})
	if err != nil {
		log.Error("agent config", "err", err)
		return
	}
	payments, err := breaker.New("payments", breaker.Config{FailureRateThreshold: 50, OpenDuration: 30 * time.Second})
	if err != nil {
		log.Error("breaker config", "err", err)
		return
	}
	if err := a.Register(payments); err != nil {
		log.Error("register", "err", err)
		return
	}
	if err := a.Start(); err != nil {
		log.Error("start", "err", err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			log.Warn("agent close", "err", err)
		}
	}()

	// ... serve, calling the payments service through the breaker:
	_ = payments.Execute(context.Background(), func(ctx context.Context) error { return nil })
}
