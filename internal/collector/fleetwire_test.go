package collector

import (
	"encoding/json"
	"github.com/cbdash/cbdash/internal/live"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestAFleetUpdateCarriesTheBatchAsApplied: what another collector reads
// back from a fleet update is the batch this one applied, every counter,
// latency bucket and headroom figure included, and one agent's batch of
// 20 window reports fits in a NOTIFY (under 8000 bytes).
func TestAFleetUpdateCarriesTheBatchAsApplied(t *testing.T) {
	t.Parallel()
	at := clocktest.Epoch()
	w := protocol.Window{
		Breaker: "payments", Start: at.UnixMilli(), Millis: 1000, State: protocol.StateForcedOpen, InFlight: 3,
		Counts: protocol.Counts{Admitted: 1, Successes: 2, Failures: 3, Errors: 4, Timeouts: 5, Panics: 6, Slow: 7, Ignored: 8,
			RejectedOpen: 9, RejectedHalfOpen: 10, RejectedForced: 11, RejectedBulkhead: 12, FallbackSuccess: 13, FallbackFailure: 14, Misuse: 15, RejectedRamp: 16},
		Latency: make([]int64, protocol.NumLatencyBuckets), LatencySumMs: 12.5, ForcedUntil: at.Add(time.Minute).UnixMilli(),
		Headroom: protocol.Headroom{Calls: 100, Failures: 20, Slow: 5, MinimumCalls: 50, FailureRate: 20,
			FailureRateThreshold: 50, SlowCallRate: 5, SlowCallRateThreshold: 80},
	}
	for i := range w.Latency {
		w.Latency[i] = int64(i * 1000)
	}
	b := &protocol.Batch{Type: protocol.TypeBatch, Seq: 42, Transitions: []protocol.Transition{{
		Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: at.UnixMilli(), Generation: 3,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50},
	}}}
	for range 20 {
		b.Windows = append(b.Windows, w)
	}
	u := batchUpdate(live.Update{Key: live.Key{Service: "checkout", Instance: "c1"}, Batch: b, At: at, Skew: -1500}, 7)
	data, err := json.Marshal([]fleetUpdate{u})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) >= 8000 {
		t.Errorf("a batch of 20 window reports is %d bytes as a fleet update, want under 8000 (inline in a NOTIFY)", len(data))
	}
	if esc, _ := json.Marshal(string(data)); notifySize(data) != len(esc)-2 {
		t.Errorf("notifySize %d, the update escaped as a JSON string is %d bytes", notifySize(data), len(esc)-2)
	}
	full, _ := json.Marshal(b)
	t.Logf("20 window reports: %d bytes as a fleet update, %d as protocol JSON", len(data), len(full))
	us, err := decodeUpdates(data)
	if err != nil {
		t.Fatal(err)
	}
	got := us[0]
	if got.Service != "checkout" || got.Instance != "c1" || got.StartedAt != 7 || got.At != at.UnixMilli() || got.Skew != -1500 {
		t.Fatalf("update %+v", got)
	}
	if back := got.batch(); !reflect.DeepEqual(back, b) {
		t.Fatalf("batch read back:\n%+v\nwant\n%+v", back, b)
	}
}
