package collector

import (
	"encoding/json"
	"fmt"

	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The compact form of the live updates collectors send each other on the
// bus (see fleet.go): an instance's transitions and window reports, with
// counts and headroom as arrays, so that one agent's batch of 20 window
// reports fits in a NOTIFY (under 8000 bytes) where its protocol JSON
// (11.5 KB) would not.

// Kinds of fleet updates.
const (
	updHello = "h" // an instance said hello to the sending collector
	updBatch = "b" // a validated batch of it, as the sender applied it
)

// fleetUpdate is one update about one instance.
type fleetUpdate struct {
	Kind      string                `json:"k"`
	Service   string                `json:"s"`
	Instance  string                `json:"i"`
	StartedAt int64                 `json:"p"`
	Seq       uint64                `json:"q,omitempty"` // the batch's; a hello's: the last stored
	At        int64                 `json:"a"`           // received, Unix ms of the sender's clock
	Skew      int64                 `json:"sk,omitempty"`
	Hello     *protocol.Hello       `json:"h,omitempty"`
	Trans     []protocol.Transition `json:"t,omitempty"`
	Windows   []compactWindow       `json:"w,omitempty"`
}

// compactWindow is a protocol.Window with its counts and headroom as
// arrays (in the order of countsOf and headroomOf).
type compactWindow struct {
	Breaker     string     `json:"b"`
	Start       int64      `json:"s"`
	Millis      int64      `json:"m"`
	State       string     `json:"st"`
	Counts      [16]int64  `json:"c"` // a 15-long array (before rejected_ramp) leaves the last 0
	InFlight    int64      `json:"f,omitempty"`
	Latency     []int64    `json:"l,omitempty"`
	LatencySum  float64    `json:"ls,omitempty"`
	Headroom    [8]float64 `json:"h"`
	ForcedUntil int64      `json:"fu,omitempty"`
}

func compactOf(w *protocol.Window) compactWindow {
	c := w.Counts
	h := w.Headroom
	return compactWindow{
		Breaker: w.Breaker, Start: w.Start, Millis: w.Millis, State: w.State, InFlight: w.InFlight,
		Latency: w.Latency, LatencySum: w.LatencySumMs, ForcedUntil: w.ForcedUntil,
		Counts: [16]int64{c.Admitted, c.Successes, c.Failures, c.Errors, c.Timeouts, c.Panics, c.Slow, c.Ignored,
			c.RejectedOpen, c.RejectedHalfOpen, c.RejectedForced, c.RejectedBulkhead, c.FallbackSuccess, c.FallbackFailure, c.Misuse, c.RejectedRamp},
		Headroom: [8]float64{float64(h.Calls), float64(h.Failures), float64(h.Slow), float64(h.MinimumCalls),
			h.FailureRate, h.FailureRateThreshold, h.SlowCallRate, h.SlowCallRateThreshold},
	}
}

func (cw *compactWindow) window() protocol.Window {
	n, h := cw.Counts, cw.Headroom
	return protocol.Window{
		Breaker: cw.Breaker, Start: cw.Start, Millis: cw.Millis, State: cw.State, InFlight: cw.InFlight,
		Latency: cw.Latency, LatencySumMs: cw.LatencySum, ForcedUntil: cw.ForcedUntil,
		Counts: protocol.Counts{Admitted: n[0], Successes: n[1], Failures: n[2], Errors: n[3], Timeouts: n[4], Panics: n[5],
			Slow: n[6], Ignored: n[7], RejectedOpen: n[8], RejectedHalfOpen: n[9], RejectedForced: n[10],
			RejectedBulkhead: n[11], FallbackSuccess: n[12], FallbackFailure: n[13], Misuse: n[14], RejectedRamp: n[15]},
		Headroom: protocol.Headroom{Calls: int64(h[0]), Failures: int64(h[1]), Slow: int64(h[2]), MinimumCalls: int64(h[3]),
			FailureRate: h[4], FailureRateThreshold: h[5], SlowCallRate: h[6], SlowCallRateThreshold: h[7]},
	}
}

// batchUpdate encodes the batch of r as applied at r.At.
func batchUpdate(r live.Update, startedAt int64) fleetUpdate {
	u := fleetUpdate{Kind: updBatch, Service: r.Key.Service, Instance: r.Key.Instance, StartedAt: startedAt,
		Seq: r.Batch.Seq, At: r.At.UnixMilli(), Skew: r.Skew, Trans: r.Batch.Transitions}
	if len(r.Batch.Windows) > 0 {
		u.Windows = make([]compactWindow, len(r.Batch.Windows))
		for i := range r.Batch.Windows {
			u.Windows[i] = compactOf(&r.Batch.Windows[i])
		}
	}
	return u
}

// batch returns the protocol batch an update carries.
func (u *fleetUpdate) batch() *protocol.Batch {
	b := &protocol.Batch{Type: protocol.TypeBatch, Seq: u.Seq, Transitions: u.Trans}
	if len(u.Windows) > 0 {
		b.Windows = make([]protocol.Window, len(u.Windows))
		for i := range u.Windows {
			b.Windows[i] = u.Windows[i].window()
		}
	}
	return b
}

// decodeUpdates reads a message of the live channel: a JSON array of
// updates.
func decodeUpdates(p []byte) ([]fleetUpdate, error) {
	var us []fleetUpdate
	if err := json.Unmarshal(p, &us); err != nil {
		return nil, fmt.Errorf("fleet update: %w", err)
	}
	return us, nil
}
