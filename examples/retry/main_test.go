package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cenkalti/backoff/v5"
)

var errBoom = errors.New("boom")

// newBreaker is a breaker on a virtual clock that opens once 4 recorded
// calls are at least half failures.
func newBreaker(t *testing.T) (*breaker.Breaker, *breakertest.Clock) {
	t.Helper()
	clk := breakertest.NewEpochClock()
	b, err := breaker.New("inventory", breaker.Config{MinimumCalls: 4, FailureRateThreshold: 50, OpenDuration: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return b, clk
}

// noWait retries at once: the tests count attempts, not time.
func noWait() Policy { return Policy{MaxAttempts: 3, BackOff: &backoff.ZeroBackOff{}} }

func TestEachAttemptIsOneCallToTheBreaker(t *testing.T) {
	b, _ := newBreaker(t)
	attempts := 0
	v, err := Call(context.Background(), b, noWait(), func(context.Context) (string, error) {
		attempts++
		if attempts < 3 {
			return "", errBoom
		}
		return "ok", nil
	})
	if err != nil || v != "ok" || attempts != 3 {
		t.Fatalf("Call = %q, %v after %d attempts", v, err, attempts)
	}
	if s := b.Snapshot().Totals; s.Admitted != 3 || s.Errors != 2 || s.Successes != 1 {
		t.Errorf("the breaker counted %+v, want each of the 3 attempts once", s)
	}
}

func TestTheAttemptCapEndsTheRetries(t *testing.T) {
	b, _ := newBreaker(t)
	attempts := 0
	_, err := Call(context.Background(), b, noWait(), func(context.Context) (int, error) { attempts++; return 0, errBoom })
	if !errors.Is(err, errBoom) || attempts != 3 {
		t.Fatalf("err = %v after %d attempts, want boom after 3", err, attempts)
	}
}

func TestARejectionEndsTheRetriesAtOnce(t *testing.T) {
	b, _ := newBreaker(t)
	attempts := 0
	policy := Policy{MaxAttempts: 10, BackOff: &backoff.ZeroBackOff{}}
	_, err := Call(context.Background(), b, policy, func(context.Context) (int, error) { attempts++; return 0, errBoom })
	// 4 failures open the breaker; the 5th attempt is rejected and is the last.
	if !errors.Is(err, breaker.ErrOpen) || attempts != 4 {
		t.Fatalf("err = %v after %d attempts, want the rejection after 4", err, attempts)
	}
	if s := b.Snapshot().Totals; s.Admitted != 4 || s.RejectedOpen != 1 {
		t.Errorf("the breaker counted %+v, want 4 calls and one rejection", s)
	}
	attempts = 0
	_, err = Call(context.Background(), b, policy, func(context.Context) (int, error) { attempts++; return 0, nil })
	if !errors.Is(err, breaker.ErrRejected) || attempts != 0 {
		t.Errorf("while open: err = %v after %d attempts, want a rejection and no attempt", err, attempts)
	}
}

func TestTheCallersDeadlineBoundsTheWhole(t *testing.T) {
	b, _ := newBreaker(t)
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	// A back-off of an hour: only the caller's context can end the wait.
	policy := Policy{MaxAttempts: 5, BackOff: backoff.NewConstantBackOff(time.Hour)}
	_, err := Call(ctx, b, policy, func(context.Context) (int, error) {
		attempts++
		cancel() // the caller gives up during the first attempt
		return 0, errBoom
	})
	if !errors.Is(err, context.Canceled) && !errors.Is(err, errBoom) {
		t.Fatalf("err = %v", err)
	}
	if attempts != 1 {
		t.Errorf("%d attempts after the caller's deadline, want 1", attempts)
	}

	deadline, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err = Call(deadline, b, policy, func(context.Context) (int, error) { return 0, errBoom })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("err = %v after %v, want the deadline, not the hour-long back-off", err, time.Since(start))
	}
}

func TestMainRuns(t *testing.T) { main() }
