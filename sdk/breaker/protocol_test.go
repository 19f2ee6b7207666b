package breaker_test

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The breaker's names and bounds are the wire protocol's, so that the
// agent can copy them across without a translation table.
func TestNamesMatchProtocol(t *testing.T) {
	t.Run("latency bounds equal protocol.LatencyBoundsMillis", func(t *testing.T) {
		if len(breaker.LatencyBounds) != len(protocol.LatencyBoundsMillis) {
			t.Fatalf("%d bounds, protocol has %d", len(breaker.LatencyBounds), len(protocol.LatencyBoundsMillis))
		}
		for i, b := range breaker.LatencyBounds {
			if want := time.Duration(protocol.LatencyBoundsMillis[i] * float64(time.Millisecond)); b != want {
				t.Errorf("bound %d is %v, protocol says %v", i, b, want)
			}
		}
		if n := len(mustNew(t, "p", breaker.Config{}).Snapshot().Latency); n != protocol.NumLatencyBuckets {
			t.Errorf("snapshot has %d latency buckets, protocol %d", n, protocol.NumLatencyBuckets)
		}
	})
	t.Run("state names", func(t *testing.T) {
		for s, want := range map[breaker.State]string{
			breaker.Closed: protocol.StateClosed, breaker.Open: protocol.StateOpen, breaker.HalfOpen: protocol.StateHalfOpen,
			breaker.ForcedOpen: protocol.StateForcedOpen, breaker.ForcedClosed: protocol.StateForcedClosed,
		} {
			if s.String() != want {
				t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
			}
		}
	})
	t.Run("cause kinds and actions", func(t *testing.T) {
		pairs := [][2]string{
			{string(breaker.CauseFailureRate), protocol.CauseFailureRate},
			{string(breaker.CauseSlowCallRate), protocol.CauseSlowCallRate},
			{string(breaker.CauseOpenElapsed), protocol.CauseOpenElapsed},
			{string(breaker.CauseProbeFailed), protocol.CauseProbeFailed},
			{string(breaker.CauseProbesSucceeded), protocol.CauseProbesSucceeded},
			{string(breaker.CauseCommand), protocol.CauseCommand},
			{string(breaker.CauseExpired), protocol.CauseExpired},
			{string(breaker.ActionForceOpen), protocol.ActionForceOpen},
			{string(breaker.ActionForceClosed), protocol.ActionForceClosed},
			{string(breaker.ActionRelease), protocol.ActionRelease},
			{string(breaker.ActionReset), protocol.ActionReset},
		}
		for _, p := range pairs {
			if p[0] != p[1] {
				t.Errorf("breaker has %q where protocol has %q", p[0], p[1])
			}
		}
	})
}
