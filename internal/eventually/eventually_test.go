package eventually_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/eventually"
)

func TestWait(t *testing.T) {
	t.Run("returns as soon as the condition holds", func(t *testing.T) {
		var n atomic.Int32
		go func() {
			for range 3 {
				n.Add(1)
			}
		}()
		eventually.True(t, "three increments", func() bool { return n.Load() == 3 })
	})
	t.Run("reports false when the condition never holds", func(t *testing.T) {
		calls := 0
		if eventually.Wait(30*time.Millisecond, func() bool { calls++; return false }) {
			t.Fatal("Wait reported true for a condition that never held")
		}
		if calls < 2 {
			t.Errorf("cond called %d times in 30ms, want it polled", calls)
		}
	})
	t.Run("checks once more at the deadline", func(t *testing.T) {
		start := time.Now()
		ok := eventually.Wait(20*time.Millisecond, func() bool { return time.Since(start) >= 20*time.Millisecond })
		if !ok {
			t.Error("a condition true at the deadline was reported false")
		}
	})
}
