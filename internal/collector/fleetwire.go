package collector

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The compact form of the live updates collectors send each other on the
// bus (see fleet.go): an instance's transitions and window reports, with
// counts and headroom as arrays, so that one agent's batch of 20 window
// reports fits in a NOTIFY (under 8000 bytes) where its protocol JSON
// (11.5 KB) would not.

// Kinds of fleet updates. A collector ignores kinds it does not know
// (those of a later build); wireVersion, in every update of this build,
// says which build's form an update has.
const (
	updHello   = "h" // an instance said hello to the sending collector (Config.FullDetail dependencies' breakers only)
	updBatch   = "b" // a validated batch of it, as the sender applied it (the same breakers only)
	updTrans   = "t" // an instance's transitions, at once (every other dependency)
	updSummary = "s" // the sender's summary of one dependency (live.Summary)
	updClaim   = "c" // an instance said hello to the sender: the others forget their lines of it
)

// wireVersion is the version of the fleet updates of this build: 2 since
// issue 36 (summaries, transitions and claims; 1, unmarked, sent every
// hello and batch).
const wireVersion = 2

// fleetUpdate is one update about one instance, or (updSummary) about
// one dependency of service Service.
type fleetUpdate struct {
	V         int                   `json:"v,omitempty"`
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
	Summary   *compactSummary       `json:"sm,omitempty"`
}

// compactSummary is a live.Summary with its counts and headroom as
// arrays (as compactWindow's) and its times in Unix ms.
type compactSummary struct {
	Breaker    string              `json:"b"`
	Instances  int                 `json:"n"`
	Stale      int                 `json:"x,omitempty"`
	ByState    map[string]int      `json:"bs,omitempty"`
	Counts     [16]int64           `json:"c"`
	Span       int64               `json:"sp"`
	Latency    []int64             `json:"l,omitempty"`
	Headroom   [8]float64          `json:"h"`
	Closeness  float64             `json:"cl"`
	OpenSince  int64               `json:"os,omitempty"`
	LastChange int64               `json:"lc,omitempty"`
	Held       *cbdash.Hold        `json:"hd,omitempty"`
	Fallback   *cbdash.FallbackRun `json:"fb,omitempty"`
	Labels     map[string]string   `json:"lb,omitempty"`
	Trip       *protocol.Cause     `json:"tr,omitempty"`
	// Last (the members' last windows summed) and Rate: absent from a
	// collector before them, read as zero.
	Last *[16]int64 `json:"lw,omitempty"`
	Rate float64    `json:"r,omitempty"`
}

// unixMs is t in Unix ms, 0 for the zero time (and back: timeOfMs).
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeOfMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// summaryUpdate encodes s.
func summaryUpdate(s live.Summary) fleetUpdate {
	cw := compactOf(&protocol.Window{Counts: s.Recent, Headroom: s.Headroom})
	return fleetUpdate{V: wireVersion, Kind: updSummary, Service: s.Service, Summary: &compactSummary{
		Breaker: s.Breaker, Instances: s.Instances, Stale: s.Stale, ByState: s.ByState, Counts: cw.Counts,
		Span: s.Span, Latency: s.Latency, Headroom: cw.Headroom, Closeness: s.Closeness,
		OpenSince: unixMs(s.OpenSince), LastChange: unixMs(s.LastChange), Held: s.Held, Fallback: s.Fallback, Labels: s.Labels,
		Trip: s.Trip, Last: lastOf(s.Last), Rate: s.Rate,
	}}
}

// lastOf is counts as compactWindow's array; nil when all zero.
func lastOf(c protocol.Counts) *[16]int64 {
	if c == (protocol.Counts{}) {
		return nil
	}
	a := compactOf(&protocol.Window{Counts: c}).Counts
	return &a
}

// summary returns the live.Summary a summary update carries.
func (u *fleetUpdate) summary() live.Summary {
	cs := u.Summary
	w := (&compactWindow{Counts: cs.Counts, Headroom: cs.Headroom}).window()
	s := live.Summary{DependencyKey: cbdash.DependencyKey{Service: u.Service, Breaker: cs.Breaker},
		Instances: cs.Instances, Stale: cs.Stale, ByState: cs.ByState, Recent: w.Counts, Span: cs.Span,
		Latency: cs.Latency, Headroom: w.Headroom, Closeness: cs.Closeness, OpenSince: timeOfMs(cs.OpenSince),
		LastChange: timeOfMs(cs.LastChange), Held: cs.Held, Fallback: cs.Fallback, Labels: cs.Labels, Trip: cs.Trip, Rate: cs.Rate}
	if cs.Last != nil {
		s.Last = (&compactWindow{Counts: *cs.Last}).window().Counts
	}
	return s
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
	u := fleetUpdate{V: wireVersion, Kind: updBatch, Service: r.Key.Service, Instance: r.Key.Instance, StartedAt: startedAt,
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
