package clocktest_test

import (
	"testing"
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

func TestRunningTicksWithItsOwnTime(t *testing.T) {
	r := clocktest.NewRunning()
	ticks, stop := r.NewTicker(time.Millisecond)
	var last time.Time
	for range 3 {
		select {
		case at := <-ticks:
			if at.Before(clocktest.Epoch()) || !at.After(last) {
				t.Fatalf("tick at %v after %v: want the running clock's time, increasing", at, last)
			}
			last = at
		case <-time.After(10 * time.Second):
			t.Fatal("no tick within 10 s")
		}
	}
	stop()
	stop() // idempotent
}
