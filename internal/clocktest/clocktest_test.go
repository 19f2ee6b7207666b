package clocktest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClocksStartAtTheEpoch(t *testing.T) {
	if got := clocktest.Virtual().Now(); !got.Equal(clocktest.Epoch()) {
		t.Errorf("Virtual() reads %v, want the epoch %v", got, clocktest.Epoch())
	}
	r := clocktest.NewRunning()
	if d := r.Now().Sub(clocktest.Epoch()); d < 0 || d > time.Minute {
		t.Errorf("NewRunning() reads %v after the epoch, want less than a minute", d)
	}
	n := clocktest.Noon()
	if n.Hour() != 12 || n.Minute() != 0 || n.Second() != 0 || n.Nanosecond() != 0 || n.YearDay() != clocktest.Epoch().UTC().YearDay() {
		t.Errorf("Noon() = %v, want noon UTC of the epoch's day (%v)", n, clocktest.Epoch())
	}
}

// TestRunningTicksWithItsOwnTime runs in a synctest bubble, where the
// system's clock (under the Running one) is the bubble's.
func TestRunningTicksWithItsOwnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := clocktest.NewRunning()
		ticks, stop := r.NewTicker(time.Millisecond)
		for i := range 3 {
			if at, want := <-ticks, clocktest.Epoch().Add(time.Duration(i+1)*time.Millisecond); !at.Equal(want) {
				t.Fatalf("tick %d at %v, want the running clock's time %v", i+1, at, want)
			}
		}
		stop()
		stop() // idempotent
	})
}
