package gobreaker_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	cbgobreaker "github.com/cbdash/cbdash/sdk/adapter/gobreaker"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/sony/gobreaker/v2"
)

// A service that already guards a dependency with gobreaker shows it on
// the dashboard by building the breaker through the adapter and
// registering it with its agent. (Compiled, not run: it needs a
// collector.)
func ExampleNewCircuitBreaker() {
	a, err := agent.New(agent.Config{
		URL: "ws://127.0.0.1:8080/api/v1/agent", Token: os.Getenv("CBDASH_AGENT_TOKEN"), Service: "checkout",
	})
	if err != nil {
		log.Fatal(err)
	}
	cb := cbgobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{
		Name:    "search",
		Timeout: 30 * time.Second,
	}, cbgobreaker.Options{})
	if err := a.RegisterSource(cb); err != nil {
		log.Fatal(err)
	}
	if err := a.Start(); err != nil {
		log.Fatal(err)
	}
	defer a.Close(context.Background())

	body, err := cb.Execute(func() ([]byte, error) {
		resp, err := http.Get("http://search.internal/q?term=shoes")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	})
	_, _ = body, err
}
