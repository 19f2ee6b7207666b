package collector

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/live"
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

// TestASummaryUpdateCarriesTheSummary: what another collector reads back
// from a summary update is the summary (every count, latency bucket,
// headroom figure, time, hold and fallback); it is a few hundred bytes,
// so a NOTIFY carries about twenty; and an update of a kind this build
// does not know (a later build's) is read without error and applied as
// nothing.
func TestASummaryUpdateCarriesTheSummary(t *testing.T) {
	t.Parallel()
	at := clocktest.Epoch()
	hist := make([]int64, protocol.NumLatencyBuckets)
	for i := range hist {
		hist[i] = int64(i * 1000)
	}
	s := live.Summary{
		DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"},
		Instances:     500, Stale: 3, ByState: map[string]int{protocol.StateClosed: 480, protocol.StateOpen: 17},
		Recent: protocol.Counts{Admitted: 1, Successes: 2, Failures: 3, Errors: 4, Timeouts: 5, Panics: 6, Slow: 7, Ignored: 8,
			RejectedOpen: 9, RejectedHalfOpen: 10, RejectedForced: 11, RejectedBulkhead: 12, FallbackSuccess: 13, FallbackFailure: 14, Misuse: 15, RejectedRamp: 16},
		Span: 60, Latency: hist,
		Headroom: protocol.Headroom{Calls: 100, Failures: 20, Slow: 5, MinimumCalls: 50, FailureRate: 20,
			FailureRateThreshold: 50, SlowCallRate: 5, SlowCallRateThreshold: 80},
		Closeness: 0.4, OpenSince: at.Add(-time.Minute), LastChange: at,
		Held:     &cbdash.Hold{HoldID: "h1", Action: protocol.ActionForceOpen, Actor: "otto", Until: at.Add(time.Hour)},
		Fallback: &cbdash.FallbackRun{LastServed: at, Served: 4, Failed: 1},
		Labels:   map[string]string{"region": "eu"},
		Trip:     &protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50},
		Last: protocol.Counts{Admitted: 21, Successes: 22, Failures: 23, Errors: 24, Timeouts: 25, Panics: 26, Slow: 27, Ignored: 28,
			RejectedOpen: 29, RejectedHalfOpen: 30, RejectedForced: 31, RejectedBulkhead: 32, FallbackSuccess: 33, FallbackFailure: 34, Misuse: 35, RejectedRamp: 36},
		Rate: 1234.5,
	}
	data, err := json.Marshal([]fleetUpdate{summaryUpdate(s), {V: 99, Kind: "z", Service: "checkout"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a summary of 500 instances with a full histogram: %d bytes", len(data))
	if len(data) > 1000 {
		t.Errorf("a summary is %d bytes, want at most 1000", len(data))
	}
	us, err := decodeUpdates(data)
	if err != nil || len(us) != 2 {
		t.Fatalf("decode: %v, %d updates", err, len(us))
	}
	if us[0].V != wireVersion || us[0].Kind != updSummary {
		t.Fatalf("update version %d kind %q", us[0].V, us[0].Kind)
	}
	if back := us[0].summary(); !reflect.DeepEqual(back, s) {
		t.Fatalf("summary read back:\n%+v\nwant\n%+v", back, s)
	}
}
