package store_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (the
// writer must stop on Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
