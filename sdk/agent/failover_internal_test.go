package agent

import (
	"fmt"
	"testing"
)

// TestFirstURLSpreadsAFleet: 300 instances of one service given the same
// three URLs start about a third on each.
func TestFirstURLSpreadsAFleet(t *testing.T) {
	urls := []string{"ws://a", "ws://b", "ws://c"}
	counts := make([]int, len(urls))
	for i := range 300 {
		counts[firstURL("checkout", fmt.Sprintf("checkout-%d", i), urls)]++
	}
	for i, n := range counts {
		if n < 70 || n > 130 {
			t.Fatalf("URL %d is the first of %d instances of 300 (counts %v)", i, n, counts)
		}
	}
	if firstURL("checkout", "checkout-1", urls) != firstURL("checkout", "checkout-1", urls) {
		t.Fatal("the first URL of an instance is not stable")
	}
}
