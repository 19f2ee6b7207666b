package breaker_test

import (
	"testing"

	"github.com/cbdash/cbdash/sdk/breaker"
)

func mustNew(tb testing.TB, name string, cfg breaker.Config) *breaker.Breaker {
	tb.Helper()
	b, err := breaker.New(name, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
