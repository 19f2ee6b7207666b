package breakertest

import (
	"fmt"
	"os"
	"time"
)

// EpochEnv names the environment variable that moves every test clock of
// the project: an RFC 3339 time (for example
// CBDASH_TEST_EPOCH=2036-02-29T23:59:30Z make test). Tests start their
// clocks at Epoch and place every fixture time relative to it, so the
// suite passes whatever the date is, and this variable proves it.
const EpochEnv = "CBDASH_TEST_EPOCH"

// DefaultEpoch is Epoch when EpochEnv is unset: a fixed instant, so that
// runs are reproducible. No test may depend on its being in the past or
// the future of the wall clock.
var DefaultEpoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Epoch returns the time every test clock starts at: EpochEnv if set,
// else DefaultEpoch. It panics if EpochEnv is not RFC 3339, so a mistyped
// value fails the run rather than being ignored.
func Epoch() time.Time {
	v := os.Getenv(EpochEnv)
	if v == "" {
		return DefaultEpoch
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		panic(fmt.Sprintf("breakertest: %s=%q is not an RFC 3339 time: %v", EpochEnv, v, err))
	}
	return t.UTC()
}

// NewEpochClock returns a virtual Clock that reads Epoch().
func NewEpochClock() *Clock { return NewClock(Epoch()) }
