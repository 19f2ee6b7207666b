package breaker_test

import (
	"context"
	"testing"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// The hot paths allocate nothing: a successful call through a closed
// breaker (with all its instrumentation), in every form, and a rejection.
func TestHotPathsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	b := mustNew(t, "alloc", breaker.Config{})
	cases := map[string]func(){
		"Execute": func() { _ = b.Execute(ctx, ok) },
		"Do":      func() { _, _ = breaker.Do(ctx, b, func(context.Context) (int, error) { return 1, nil }) },
		"Allow and Done": func() {
			c, _ := b.Allow()
			c.Done(nil)
		},
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocs per call", name, n)
		}
	}
	open := mustNew(t, "open", breaker.Config{})
	if _, err := open.Apply(breaker.Command{Action: breaker.ActionForceOpen}); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = open.Execute(ctx, ok) }); n != 0 {
		t.Errorf("rejection: %v allocs per call", n)
	}
}

func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	cb := mustNew(b, "bench", breaker.Config{})
	ok := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = cb.Execute(ctx, ok)
	}
}
