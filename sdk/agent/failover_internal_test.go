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
	// Stable: the same instance starts at the same URL on every start (FNV-1a
	// of "checkout\x00checkout-1", as docs/protocol.md describes).
	h := uint32(2166136261)
	for _, c := range []byte("checkout\x00checkout-1") {
		h = (h ^ uint32(c)) * 16777619
	}
	if got, want := firstURL("checkout", "checkout-1", urls), int(h%3); got != want {
		t.Fatalf("firstURL = %d, want %d", got, want)
	}
}
