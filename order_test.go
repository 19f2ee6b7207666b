package cbdash_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestEveryOrderIsTotalAndBreaksTiesByName(t *testing.T) {
	dep := func(svc, br, state string, window, failure float64, rate float64, p99 time.Duration) cbdash.Dependency {
		return cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: svc, Breaker: br}, State: state, FailureRate: failure,
			RequestRate: rate, P99: p99, Headroom: protocol.Headroom{Calls: 100, MinimumCalls: 10, FailureRate: window, FailureRateThreshold: 50}}
	}
	all := []cbdash.Dependency{
		dep("b", "x", protocol.StateClosed, 40, 1, 5, time.Millisecond),
		dep("a", "y", protocol.StateClosed, 40, 9, 5, 9*time.Millisecond),
		dep("c", "z", protocol.StateOpen, 0, 9, 1, time.Millisecond),
		dep("a", "x", protocol.StateClosed, 10, 1, 50, time.Millisecond),
	}
	for _, tt := range []struct{ order, want string }{
		{cbdash.OrderWorst, "c/z a/y b/x a/x"}, // open first; then the nearest its threshold; ties by name
		{"", "c/z a/y b/x a/x"},
		{cbdash.OrderErrorRate, "a/y c/z a/x b/x"},
		{cbdash.OrderP99, "a/y a/x b/x c/z"},
		{cbdash.OrderRequestRate, "a/x a/y b/x c/z"},
		{cbdash.OrderName, "a/x a/y b/x c/z"},
	} {
		t.Run(tt.order, func(t *testing.T) {
			ds := append([]cbdash.Dependency(nil), all...)
			cbdash.SortDependencies(ds, tt.order)
			var got []string
			for _, d := range ds {
				got = append(got, d.DependencyKey.String())
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("sorted %v, want %s", got, tt.want)
			}
		})
	}
	if _, err := cbdash.ParseOrder("fastest"); !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "error_rate") {
		t.Errorf("ParseOrder(fastest) = %v, want ErrInvalid listing the orders", err)
	}
	if o, err := cbdash.ParseOrder(""); o != cbdash.OrderWorst || err != nil {
		t.Errorf("ParseOrder(\"\") = %q, %v: want worst", o, err)
	}
}
