package hystrixgo_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/afex/hystrix-go/hystrix"

	cbhystrix "github.com/cbdash/cbdash/sdk/adapter/hystrixgo"
	"github.com/cbdash/cbdash/sdk/agent"
)

// A service that already guards its dependencies with hystrix-go shows
// every command on the dashboard, with exact counts, by registering the
// adapter with its agent once, before the commands' first calls.
// (Compiled, not run: it needs a collector.)
func ExampleRegister() {
	a, err := agent.New(agent.Config{
		URL: "ws://127.0.0.1:8080/api/v1/agent", Token: os.Getenv("CBDASH_AGENT_TOKEN"), Service: "checkout",
	})
	if err != nil {
		log.Fatal(err)
	}
	ad := cbhystrix.Register(a, cbhystrix.Options{})
	defer ad.Close()
	if err := a.Start(); err != nil {
		log.Fatal(err)
	}
	defer a.Close(context.Background())

	hystrix.ConfigureCommand("search", hystrix.CommandConfig{Timeout: 500, ErrorPercentThreshold: 25})
	err = hystrix.Do("search", func() error {
		resp, err := http.Get("http://search.internal/q?term=shoes")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}, nil)
	_ = err
}
