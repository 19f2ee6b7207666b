package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// A breaker guarding calls to one dependency: after enough failures it
// opens and rejects calls without making them.
func Example() {
	b, err := breaker.New("payments", breaker.Config{
		Window:       breaker.Window{Size: 10},
		MinimumCalls: 4,
		OpenDuration: 30 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) error { return errors.New("503 from the payment provider") }
	for range 5 {
		err := b.Execute(context.Background(), charge)
		fmt.Println(err)
	}
	fmt.Println(b.State())
	// Output:
	// 503 from the payment provider
	// 503 from the payment provider
	// 503 from the payment provider
	// 503 from the payment provider
	// breaker: open
	// open
}

// Do returns the value of the protected call.
func ExampleDo() {
	b, _ := breaker.New("prices", breaker.Config{})
	price, err := breaker.Do(context.Background(), b, func(ctx context.Context) (int, error) {
		return 42, nil
	})
	fmt.Println(price, err)
	// Output: 42 <nil>
}

// A fallback answers when the breaker rejects the call or the call fails.
func ExampleBreaker_ExecuteWithFallback() {
	b, _ := breaker.New("recommendations", breaker.Config{})
	_, _ = b.Apply(breaker.Command{Action: breaker.ActionForceOpen, Reason: "provider maintenance"})
	err := b.ExecuteWithFallback(context.Background(),
		func(ctx context.Context) error { return nil },
		func(ctx context.Context, err error) error {
			fmt.Println("fallback after:", err)
			return nil
		})
	fmt.Println(err, b.Snapshot().Totals.FallbackSuccesses)
	// Output:
	// fallback after: breaker: forced open
	// <nil> 1
}

// Middleware that cannot wrap the call in a function admits it first and
// reports how it ended afterwards.
func ExampleBreaker_Allow() {
	b, _ := breaker.New("search", breaker.Config{})
	call, err := b.Allow()
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	// ... make the call ...
	call.Done(breaker.Ignorable(errors.New("404: no such item"))) // not the dependency's fault
	fmt.Printf("%+v\n", b.Snapshot().Window)
	// Output: {Calls:0 Failures:0 Slow:0 FailureRate:0 SlowCallRate:0}
}

// Observers get each transition with its cause. A virtual clock makes the
// example's timing exact.
func ExampleBreaker_Subscribe() {
	clk := breakertest.NewEpochClock()
	start := clk.Now()
	b, _ := breaker.New("inventory", breaker.Config{
		Window: breaker.Window{Size: 4}, MinimumCalls: 4, OpenDuration: time.Second, Clock: clk,
	})
	cancel := b.Subscribe(func(t breaker.Transition) {
		fmt.Printf("%s %v>%v %s at +%v\n", t.Breaker, t.From, t.To, t.Cause.Kind, t.At.Sub(start))
	})
	defer cancel()
	for _, err := range []error{nil, nil, errors.New("down"), errors.New("down")} {
		_ = b.Execute(context.Background(), func(context.Context) error { return err })
	}
	clk.Advance(time.Second)
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	// Output:
	// inventory closed>open failure_rate at +0s
	// inventory open>half_open open_elapsed at +1s
	// inventory half_open>closed probes_succeeded at +1s
}

// Operator commands hold a state for a while.
func ExampleBreaker_Apply() {
	b, _ := breaker.New("email", breaker.Config{})
	st, _ := b.Apply(breaker.Command{ID: "c-1", Action: breaker.ActionForceOpen, TTL: time.Hour, Reason: "provider outage", Actor: "ana"})
	fmt.Println(st, b.Snapshot().Forced.Reason)
	st, _ = b.Apply(breaker.Command{ID: "c-2", Action: breaker.ActionRelease})
	fmt.Println(st)
	// Output:
	// forced_open provider outage
	// closed
}

// An http.Client whose requests to each host go through that host's
// breaker; here one breaker is named explicitly.
func ExampleNewTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: breaker.NewTransport(base, breaker.TransportConfig{
		Config:     breaker.Config{Window: breaker.Window{Size: 4}, MinimumCalls: 2},
		BreakerFor: func(*http.Request) string { return "payments" },
		OnNew:      func(b *breaker.Breaker) { fmt.Println("new breaker", b.Name()) },
	})}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println("open:", errors.Is(err, breaker.ErrOpen))
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// new breaker payments
	// 503
	// 503
	// open: true
}

// Shadow settings: the live breaker judges 50 % of the last 20 calls; a
// shadow configuration beside it, never enforced, judges 20 %. A 25 %
// failure rate would have opened the shadow: its transition goes to
// SubscribeShadows (the agent sends it to cbdash, marked as shadow),
// while every call goes through.
func ExampleShadow() {
	b, err := breaker.New("payments", breaker.Config{
		Window: breaker.Window{Size: 20}, MinimumCalls: 20, FailureRateThreshold: 50,
		Shadows: []breaker.Shadow{{Name: "tight", Config: breaker.Config{
			Window: breaker.Window{Size: 20}, MinimumCalls: 20, FailureRateThreshold: 20,
		}}},
	})
	if err != nil {
		panic(err)
	}
	b.SubscribeShadows(func(t breaker.Transition) {
		fmt.Printf("shadow %s would have gone %s > %s at %.0f%% failures\n", t.Shadow, t.From, t.To, t.Cause.FailureRate)
	})
	rejected := 0
	for i := range 40 {
		err := b.Execute(context.Background(), func(context.Context) error {
			if i%4 == 0 {
				return errors.New("503")
			}
			return nil
		})
		if errors.Is(err, breaker.ErrRejected) {
			rejected++
		}
	}
	s, _ := b.ShadowSnapshot("tight")
	fmt.Println("live:", b.State(), "rejected:", rejected, "shadow:", s.State)
	// Output:
	// shadow tight would have gone closed > open at 25% failures
	// live: closed rejected: 0 shadow: open
}
