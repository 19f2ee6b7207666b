package web

import (
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestTheStandInHashHasTheConfiguredCost: a login naming no account is
// checked against a hash of Config.PasswordCost, so that it takes as
// long as a wrong password for an account hashed at that cost.
func TestTheStandInHashHasTheConfiguredCost(t *testing.T) {
	t.Parallel()
	for _, cost := range []int{bcrypt.MinCost, bcrypt.MinCost + 1} {
		h := dummyHash(cost)
		if got, err := bcrypt.Cost(h()); err != nil || got != cost {
			t.Errorf("stand-in hash at cost %d: cost %d, %v", cost, got, err)
		}
		if first, again := h(), h(); &first[0] != &again[0] {
			t.Error("the stand-in hash is made again on each use")
		}
	}
}
