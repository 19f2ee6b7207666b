package cbdash

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Orders of dependencies: the one set the overview, the API
// (GET /api/v1/dependencies and /api/v1/breakers ?sort=) and the CLI
// (cbdash status --sort) sort by, all through DependencyCompare.
const (
	// OrderWorst is worst first, the default everywhere: state (open,
	// half-open, forced open, forced closed, closed; StateRank), then
	// closeness to opening (ClosenessOf(Headroom).Score, the nearest its
	// threshold first), then name.
	OrderWorst = "worst"
	// OrderName is by service, then breaker.
	OrderName = "name"
	// OrderRequestRate is the busiest first (RequestRate).
	OrderRequestRate = "request_rate"
	// OrderErrorRate is the highest failure rate of the last minute
	// first (FailureRate), Hystrix's "error rate" sort.
	OrderErrorRate = "error_rate"
	// OrderP99 is the slowest first: the p99 latency of the last minute
	// (P99), Hystrix's latency sort.
	OrderP99 = "p99"
)

// Orders lists the orders, the default first.
var Orders = []string{OrderWorst, OrderErrorRate, OrderP99, OrderRequestRate, OrderName}

// ParseOrder returns the order named s; "" is OrderWorst. An unknown name
// is an error wrapping ErrInvalid that lists the orders.
func ParseOrder(s string) (string, error) {
	if s == "" {
		return OrderWorst, nil
	}
	if slices.Contains(Orders, s) {
		return s, nil
	}
	return "", fmt.Errorf("%w: sort %q is not one of %s", ErrInvalid, truncate(s, 40), strings.Join(Orders, ", "))
}

// WorstKey is what worst-first order compares of a dependency, worked
// out once (a sort of many dependencies compares each many times).
type WorstKey struct {
	Rank  int     // StateRank(State)
	Score float64 // ClosenessOf(Headroom).Score
}

// WorstKeyOf is d's WorstKey.
func WorstKeyOf(d *Dependency) WorstKey {
	return WorstKey{Rank: StateRank(d.State), Score: ClosenessOf(d.Headroom).Score}
}

// CompareWorst compares two dependencies' keys in worst-first order: the
// worse state first, then the closer to opening; 0 when they tie (then
// DependencyCompare orders them by name).
func CompareWorst(a, b WorstKey) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(b.Score, a.Score))
}

// DependencyCompare compares a and b in order (one of Orders; another
// is OrderWorst): negative when a comes first. Ties in an order's own
// figure are broken by service, then breaker name, so every order is
// total.
func DependencyCompare(a, b *Dependency, order string) int {
	c := 0
	switch order {
	case OrderName:
	case OrderRequestRate:
		c = cmp.Compare(b.RequestRate, a.RequestRate)
	case OrderErrorRate:
		c = cmp.Compare(b.FailureRate, a.FailureRate)
	case OrderP99:
		c = cmp.Compare(b.P99, a.P99)
	default:
		c = CompareWorst(WorstKeyOf(a), WorstKeyOf(b))
	}
	return cmp.Or(c, cmp.Compare(a.Service, b.Service), cmp.Compare(a.Breaker, b.Breaker))
}

// SortDependencies sorts ds in order (see DependencyCompare).
func SortDependencies(ds []Dependency, order string) {
	sort.Slice(ds, func(i, j int) bool { return DependencyCompare(&ds[i], &ds[j], order) < 0 })
}
