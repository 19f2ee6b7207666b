package failsafe_test

import (
	"context"
	"log"
	"os"
	"time"

	cbfailsafe "github.com/cbdash/cbdash/sdk/adapter/failsafe"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// A service that guards a dependency with failsafe-go builds its breaker
// through the adapter and registers it with its agent; the dashboard can
// then also hold it open or closed. (Compiled, not run: it needs a
// collector.)
func ExampleNew() {
	a, err := agent.New(agent.Config{
		URL: "ws://127.0.0.1:8080/api/v1/agent", Token: os.Getenv("CBDASH_AGENT_TOKEN"), Service: "checkout",
	})
	if err != nil {
		log.Fatal(err)
	}
	cb := cbfailsafe.New("payments", circuitbreaker.NewBuilder[string]().
		WithFailureThresholdRatio(5, 10).
		WithDelay(30*time.Second), cbfailsafe.Options{})
	if err := a.RegisterSource(cb); err != nil {
		log.Fatal(err)
	}
	if err := a.Start(); err != nil {
		log.Fatal(err)
	}
	defer a.Close(context.Background())

	receipt, err := cb.Get(context.Background(), func(ctx context.Context) (string, error) {
		return "receipt-1", nil // call the payments service with ctx
	})
	_, _ = receipt, err
}
