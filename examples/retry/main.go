// Command retry shows retries done inside a circuit breaker's budget, with
// github.com/cenkalti/backoff/v5 around sdk/breaker's Execute:
//
//   - every attempt is one call through the breaker, so the breaker counts
//     each one and can trip on them;
//   - attempts are spaced by exponential back-off and capped in number;
//   - a rejection by the breaker (open, half-open with no probe free, held
//     open, bulkhead full) ends the retries at once: retrying a breaker
//     that says no only burns the caller's time (backoff.Permanent);
//   - the caller's context bounds the whole, waits included.
//
// Retrying outside the breaker (a breaker inside each retry loop's
// attempt, or retries around a call that the breaker rejected) is the
// mistake this avoids: it multiplies load on a failing dependency and
// keeps callers waiting on a breaker that is open.
//
//	go run ./examples/retry
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cenkalti/backoff/v5"
)

// Policy bounds the retries of one call.
type Policy struct {
	// MaxAttempts caps the attempts, the first included; 0 means 3.
	MaxAttempts uint
	// BackOff spaces the attempts; nil means exponential back-off from
	// 100 ms (backoff.NewExponentialBackOff with that initial interval).
	BackOff backoff.BackOff
}

// Call runs fn through b, retrying failures as p allows. It returns fn's
// result, or the last error: a rejection by b (matching
// breaker.ErrRejected) as soon as it happens, or ctx's error when the
// caller's deadline ends the retries first.
func Call[T any](ctx context.Context, b *breaker.Breaker, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if p.BackOff == nil {
		e := backoff.NewExponentialBackOff()
		e.InitialInterval = 100 * time.Millisecond
		p.BackOff = e
	}
	return backoff.Retry(ctx, func() (T, error) {
		v, err := breaker.Do(ctx, b, fn)
		if errors.Is(err, breaker.ErrRejected) || ctx.Err() != nil {
			return v, backoff.Permanent(err) // no retry against a breaker that refuses, or past the deadline
		}
		return v, err
	}, backoff.WithBackOff(p.BackOff), backoff.WithMaxTries(p.MaxAttempts), backoff.WithMaxElapsedTime(0))
}

func main() {
	b, err := breaker.New("inventory", breaker.Config{MinimumCalls: 4, FailureRateThreshold: 50})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	attempts := 0
	stock, err := Call(ctx, b, Policy{MaxAttempts: 3, BackOff: backoff.NewConstantBackOff(10 * time.Millisecond)},
		func(context.Context) (int, error) {
			attempts++
			if attempts < 3 {
				return 0, errors.New("inventory: 503")
			}
			return 42, nil
		})
	fmt.Printf("stock %d after %d attempts, err %v, breaker %v\n", stock, attempts, err, b.State())
}
