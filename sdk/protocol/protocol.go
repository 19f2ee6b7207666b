// Package protocol defines the messages that a cbdash agent and the cbdash
// collector exchange, version 1 ("cbdash.v1"), as described in
// docs/protocol.md.
//
// Every message is one JSON object in one websocket text frame (or, for
// POST /api/v1/ingest, one JSON request body). All timestamps are Unix
// milliseconds (UTC); all durations are milliseconds; all rates are percents
// in 0..100. The package holds data types and validation only: it does no I/O
// and is safe for concurrent use (its types are plain values).
package protocol

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Subprotocol is the websocket subprotocol an agent must offer and the
// collector must select.
const Subprotocol = "cbdash.v1"

// Version is the protocol version carried in Hello.Protocol.
const Version = 1

// Limits of the protocol. A frame or body larger than MaxMessageBytes is
// refused; a hello with more than MaxBreakersPerHello breakers is refused.
const (
	MaxMessageBytes     = 1 << 20 // 1 MiB per frame / body
	MaxBreakersPerHello = 1000
	MaxNameLen          = 200 // service, instance, breaker names and label keys/values
	MaxLabels           = 32
	MaxSettings         = 64    // BreakerConfig.Settings entries per breaker
	MaxTransitions      = 10000 // per batch
	MaxWindows          = 10000 // per batch
	MaxCommandResults   = 1000  // per batch
	MaxFutureSkewMillis = 5 * 60 * 1000
	MaxWindowMillis     = 3600 * 1000      // longest Window.Millis (one hour)
	MaxLostSpans        = 1000             // Dropped.Lost entries per batch
	MaxLostSpanMillis   = 24 * 3600 * 1000 // longest LostSpan (a day)
	// MaxSeq is the largest batch sequence number: the largest integer a
	// JSON number carries exactly in every language (2^53-1), far below
	// the 2^63 a store's signed integers hold.
	MaxSeq = 1<<53 - 1
	// MaxCount bounds every count of one window report (each counter,
	// latency bucket, in-flight and headroom count): 2^40, about 1.1e12,
	// a million million calls in at most an hour. Sums of many reports
	// then stay far from int64's limit.
	MaxCount = 1 << 40
	// MaxLatencySumMillis bounds a window's latency_sum_ms: 1e15 ms, the
	// time of MaxCount calls of about 15 minutes each.
	MaxLatencySumMillis = 1e15
	// MaxStartedAtAheadMillis is how far a hello's started_at may be ahead
	// of the collector's clock: one day. A clock merely ahead is skew (the
	// collector copes); beyond a day the value is not a start time.
	MaxStartedAtAheadMillis = 24 * 3600 * 1000
	// MaxTextLen bounds free text: reasons, actors, errors, sdk_version.
	MaxTextLen = 1000
	// MaxHosts bounds Window.Hosts.Total: the hosts one cluster's window
	// report stands for.
	MaxHosts = 100000
)

// Window kinds, BreakerConfig.WindowKind.
const (
	WindowCount = "count"
	WindowTime  = "time"
)

// Message types, the value of the "type" field of every message.
const (
	// Agent to collector.
	TypeHello = "hello"
	TypeBatch = "batch"
	// Collector to agent.
	TypeWelcome = "welcome"
	TypeAck     = "ack"
	TypeError   = "error"
	TypeCommand = "command"
)

// States of a breaker, as strings on the wire.
const (
	StateClosed       = "closed"
	StateOpen         = "open"
	StateHalfOpen     = "half_open"
	StateForcedOpen   = "forced_open"
	StateForcedClosed = "forced_closed"
)

// ValidState reports whether s is one of the State constants.
func ValidState(s string) bool {
	switch s {
	case StateClosed, StateOpen, StateHalfOpen, StateForcedOpen, StateForcedClosed:
		return true
	}
	return false
}

// Operator command actions.
const (
	ActionForceOpen   = "force_open"
	ActionForceClosed = "force_closed"
	ActionRelease     = "release"
	ActionReset       = "reset"
)

// ValidAction reports whether a is one of the Action constants.
func ValidAction(a string) bool {
	switch a {
	case ActionForceOpen, ActionForceClosed, ActionRelease, ActionReset:
		return true
	}
	return false
}

// Transition causes (Cause.Kind).
const (
	CauseFailureRate     = "failure_rate"     // closed > open: failure rate reached its threshold
	CauseSlowCallRate    = "slow_call_rate"   // closed > open: slow-call rate reached its threshold
	CauseOpenElapsed     = "open_elapsed"     // open > half_open: the open duration passed
	CauseProbeFailed     = "probe_failed"     // half_open > open
	CauseProbesSucceeded = "probes_succeeded" // half_open > closed
	CauseCommand         = "command"          // any > forced_*, or release/reset
	CauseExpired         = "expired"          // forced_* > closed: the command's TTL ran out
	// CauseLibraryRule is closed > open by the own trip rule of a breaker
	// library fed through an adapter (gobreaker's ReadyToTrip); the
	// window figures are what that library had counted.
	CauseLibraryRule = "library_rule"
	// CauseAgentCommand is a command the agent reported but the collector
	// did not send to that instance (the breaker's own API, or a claim it
	// cannot back): the collector stores a cause of kind command so when
	// its command_id is not one of its commands for the instance, keeping
	// the agent's action, actor and reason as what the agent said.
	CauseAgentCommand = "agent_command"
	// CauseSampled is a change that a source reading a breaker's state
	// (a Hystrix stream, a Prometheus scrape) saw between two reads:
	// when and why it happened are not known (At is the read; Reason
	// says what was read).
	CauseSampled = "sampled"
	// CauseQuorum is a transition a quorum advisory made: a force_open
	// the collector sent on its own to the instances of a dependency that
	// had not tripped when enough others had (its Reason has the rule and
	// the figures), or that advisory's release at the quorum's first
	// close. Agents report it as command, as any command; the collector
	// stores it as quorum once it has checked that it sent that command.
	CauseQuorum = "quorum"
)

// LatencyBoundsMillis are the upper bounds (inclusive, milliseconds) of the
// latency histogram buckets every agent reports; a final bucket counts calls
// slower than the last bound. Fixed bounds make histograms from many
// instances mergeable by adding bucket counts.
var LatencyBoundsMillis = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// NumLatencyBuckets is len(LatencyBoundsMillis)+1 (the overflow bucket).
var NumLatencyBuckets = len(LatencyBoundsMillis) + 1

// Envelope is decoded first to learn a message's type.
type Envelope struct {
	Type string `json:"type"`
}

// Hello is the first message of every connection, agent to collector. It
// (re)declares the instance and the full configuration of its breakers.
// An agent may send another Hello with the same Service, Instance and
// StartedAt on an open connection to declare breakers registered since;
// the collector does not answer it (no Welcome).
type Hello struct {
	Type       string            `json:"type"` // "hello"
	Protocol   int               `json:"protocol"`
	Service    string            `json:"service"`
	Instance   string            `json:"instance"`
	SDKVersion string            `json:"sdk_version"`
	Labels     map[string]string `json:"labels,omitempty"`
	// StartedAt is when the agent process started (Unix ms); a new value
	// with the same instance id means the instance restarted and its
	// sequence numbers start again at 1.
	StartedAt int64           `json:"started_at"`
	Breakers  []BreakerConfig `json:"breakers"`
}

// BreakerConfig is a breaker's configuration as reported in Hello.
// Zero values mean what they mean in sdk/breaker.Config.
type BreakerConfig struct {
	Name                     string  `json:"name"`
	WindowKind               string  `json:"window_kind"`         // "count" or "time"; may be "" only when Library is set
	WindowSize               int     `json:"window_size"`         // calls, for count windows
	WindowMillis             int64   `json:"window_ms,omitempty"` // for time windows
	WindowBuckets            int     `json:"window_buckets,omitempty"`
	FailureRateThreshold     float64 `json:"failure_rate_threshold"`   // percent
	SlowCallDurationMillis   int64   `json:"slow_call_duration_ms"`    // 0 = off
	SlowCallRateThreshold    float64 `json:"slow_call_rate_threshold"` // percent
	MinimumCalls             int     `json:"minimum_calls"`
	OpenDurationMillis       int64   `json:"open_duration_ms"`
	OpenBackoffMultiplier    float64 `json:"open_backoff_multiplier,omitempty"`
	OpenBackoffMaxMillis     int64   `json:"open_backoff_max_ms,omitempty"`
	HalfOpenMaxCalls         int     `json:"half_open_max_calls"`
	HalfOpenSuccessThreshold int     `json:"half_open_success_threshold"`
	CallTimeoutMillis        int64   `json:"call_timeout_ms,omitempty"`
	MaxConcurrent            int     `json:"max_concurrent,omitempty"` // 0 = no bulkhead
	// RampMillis is the ramp after a recovery (sdk/breaker
	// Config.RampDuration): after closing from half-open, the share of
	// calls admitted rises from 0 to all over this many ms. 0 (and
	// absent, as from older agents) = no ramp.
	RampMillis int64 `json:"ramp_ms,omitempty"`
	// Library names the breaker library when the breaker is not an
	// sdk/breaker one but fed to the agent by an adapter (for example
	// "sony/gobreaker v2", "failsafe-go" or "afex/hystrix-go"); empty for sdk/breaker. The
	// fields above are then zero where the library has no such setting.
	Library string `json:"library,omitempty"`
	// Settings are the library's own settings, in its terms (for
	// gobreaker: MaxRequests, Interval, Timeout...); empty for sdk/breaker.
	Settings Settings `json:"settings,omitzero"`
	// HoldsUnsupported is set when the breaker cannot apply operator
	// commands (force open, force closed, release, reset): its library
	// has no way to hold it. The agent refuses such commands; false (and
	// absent, as from older agents) means commands are applied.
	HoldsUnsupported bool `json:"holds_unsupported,omitempty"`
	// Sampled is set when the collector reads the breaker's state by
	// sampling it (a Hystrix stream, a Prometheus scrape) rather than
	// being told of each transition: transitions are inferred between two
	// samples (a short open or half-open between them is missed), and a
	// source may not tell half-open from open (the Hystrix stream shows
	// both as open). false (and absent) means transitions are pushed.
	Sampled bool `json:"sampled,omitempty"`
	// Estimated is set when the counts of the breaker's window reports
	// are estimated rather than counted: a source recovers them from the
	// rolling counts of a Hystrix stream, which tell the events of a
	// sliding window, not each event (the README says how close they
	// come). false (and absent) means the counts are the breaker's own.
	Estimated bool `json:"estimated,omitempty"`
	// Shadows are the breaker's shadow configurations (sdk/breaker
	// Config.Shadows): up to MaxShadows settings run beside the live
	// ones on the same calls and never enforced, each a BreakerConfig
	// whose Name is the shadow's name. Their would-be transitions come in
	// Batch.ShadowTransitions. Empty (and absent, as from older agents)
	// = none.
	Shadows Shadows `json:"shadows,omitzero"`
}

// Batch is the unit of upstream data: everything an agent has to say since
// its previous batch. Seq is per instance, starts at 1 for each StartedAt,
// and increases by one for each batch. The collector stores a batch
// atomically and acknowledges it; a batch whose Seq is at or below the last
// one stored is a duplicate and is acknowledged without being stored again.
type Batch struct {
	Type        string       `json:"type"` // "batch"
	Seq         uint64       `json:"seq"`
	SentAt      int64        `json:"sent_at"` // Unix ms
	Transitions []Transition `json:"transitions,omitempty"`
	// ShadowTransitions are the would-be transitions of the breakers'
	// shadow configurations (BreakerConfig.Shadows), each with Shadow
	// set: never enforced, never part of a breaker's state. They have an
	// array of their own so that a collector that predates them ignores
	// them (an unknown field) rather than taking them for live ones.
	ShadowTransitions []Transition    `json:"shadow_transitions,omitempty"`
	Windows           []Window        `json:"windows,omitempty"`
	CommandResults    []CommandResult `json:"command_results,omitempty"`
	// Dropped counts what the agent had to throw away since the last batch
	// because its buffer was full (window reports merged or dropped).
	Dropped *Dropped `json:"dropped,omitempty"`
}

// Dropped counts data lost in the agent under memory pressure.
type Dropped struct {
	Windows int64 `json:"windows"` // window reports dropped (their counts are lost)
	Merged  int64 `json:"merged"`  // window reports merged into a neighbour (counts kept, resolution lost)
	Batches int64 `json:"batches"` // batches refused by the collector and given up
	// Transitions and CommandResults are a last resort: they are dropped
	// only when the buffer is full of them after every window report is
	// gone.
	Transitions    int64 `json:"transitions,omitempty"`
	CommandResults int64 `json:"command_results,omitempty"`
	// Calls is the number of calls (admitted and rejected) that the
	// dropped window reports counted: exactly what the history misses.
	// Optional: 0 and absent from agents that do not count it.
	Calls int64 `json:"calls,omitempty"`
	// Lost says which time the dropped window reports covered, per
	// breaker; the collector records it as a gap in that dependency's
	// history. At most MaxLostSpans; optional.
	Lost []LostSpan `json:"lost,omitempty"`
}

// LostSpan is a period [Start, End) of one breaker whose window reports
// the agent dropped, and the calls (admitted and rejected) they counted.
type LostSpan struct {
	Breaker string `json:"breaker"`
	Start   int64  `json:"start"` // Unix ms
	End     int64  `json:"end"`   // Unix ms, after Start, at most MaxLostSpanMillis later
	Calls   int64  `json:"calls"` // 0..MaxCount
}

// IsZero reports whether d counts nothing.
func (d *Dropped) IsZero() bool {
	return d == nil || (d.Windows == 0 && d.Merged == 0 && d.Batches == 0 && d.Transitions == 0 &&
		d.CommandResults == 0 && d.Calls == 0 && len(d.Lost) == 0)
}

// Add adds o to d: counts sum, lost spans are appended.
func (d *Dropped) Add(o Dropped) {
	d.Windows = SatAdd(d.Windows, o.Windows)
	d.Merged = SatAdd(d.Merged, o.Merged)
	d.Batches = SatAdd(d.Batches, o.Batches)
	d.Transitions = SatAdd(d.Transitions, o.Transitions)
	d.CommandResults = SatAdd(d.CommandResults, o.CommandResults)
	d.Calls = SatAdd(d.Calls, o.Calls)
	d.Lost = append(d.Lost, o.Lost...)
}

// Transition is one state change of one breaker, pushed as it happens.
type Transition struct {
	Breaker    string `json:"breaker"`
	From       string `json:"from"`
	To         string `json:"to"`
	At         int64  `json:"at"` // Unix ms
	Generation uint64 `json:"generation"`
	Cause      Cause  `json:"cause"`
	// OpenMillis is, for a transition to open, how long the breaker will
	// stay open (after backoff); 0 otherwise.
	OpenMillis int64 `json:"open_ms,omitempty"`
	// Shadow is, in Batch.ShadowTransitions only, the name of the shadow
	// configuration (BreakerConfig.Shadows) whose would-be transition
	// this is: it was not enforced. Empty in Batch.Transitions.
	Shadow string `json:"shadow,omitempty"`
}

// Cause says why a transition happened.
type Cause struct {
	Kind string `json:"kind"` // one of the Cause* constants
	// For failure_rate / slow_call_rate: the window at the moment it tripped.
	FailureRate  float64 `json:"failure_rate,omitempty"`
	SlowCallRate float64 `json:"slow_call_rate,omitempty"`
	Threshold    float64 `json:"threshold,omitempty"`
	WindowCalls  int64   `json:"window_calls,omitempty"`
	WindowFailed int64   `json:"window_failures,omitempty"`
	WindowSlow   int64   `json:"window_slow,omitempty"`
	ProbeOutcome string  `json:"probe_outcome,omitempty"` // probe_failed: "error", "timeout", "panic", "slow"
	CommandID    string  `json:"command_id,omitempty"`
	Action       string  `json:"action,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	Actor        string  `json:"actor,omitempty"`
	ExpiresAt    int64   `json:"expires_at,omitempty"` // forced states: Unix ms, 0 = no expiry
}

// Counts are outcome counters over one report period (deltas of the
// breaker's cumulative counters). Every field is >= 0.
type Counts struct {
	Admitted         int64 `json:"admitted"`
	Successes        int64 `json:"successes"`
	Failures         int64 `json:"failures"` // errors + timeouts + panics
	Errors           int64 `json:"errors"`
	Timeouts         int64 `json:"timeouts"`
	Panics           int64 `json:"panics"`
	Slow             int64 `json:"slow"`
	Ignored          int64 `json:"ignored"` // ignored + canceled outcomes
	RejectedOpen     int64 `json:"rejected_open"`
	RejectedHalfOpen int64 `json:"rejected_half_open_full"`
	RejectedForced   int64 `json:"rejected_forced_open"`
	RejectedBulkhead int64 `json:"rejected_bulkhead"`
	FallbackSuccess  int64 `json:"fallback_successes"`
	FallbackFailure  int64 `json:"fallback_failures"`
	// Misuse counts ends of calls that had already ended (a service
	// bug: a second Done of one call), each ignored by the breaker.
	// Optional: omitted when 0, and by agents that do not count it.
	Misuse int64 `json:"misuse,omitempty"`
	// RejectedRamp counts calls rejected by a breaker ramping up after a
	// recovery (sdk/breaker Config.RampDuration: closed, admitting a rising
	// share of the calls; the fallback serves the rest). Optional: omitted
	// when 0, and by agents whose breakers do not ramp. Part of Rejected.
	RejectedRamp int64 `json:"rejected_ramp,omitempty"`
}

// Rejected is the sum of every rejection reason.
func (c Counts) Rejected() int64 {
	return c.RejectedOpen + c.RejectedHalfOpen + c.RejectedForced + c.RejectedBulkhead + c.RejectedRamp
}

// Add adds o to c field by field. A sum that would overflow int64 stays
// at math.MaxInt64 (saturating: a total never wraps to negative).
func (c *Counts) Add(o Counts) {
	c.Admitted = SatAdd(c.Admitted, o.Admitted)
	c.Successes = SatAdd(c.Successes, o.Successes)
	c.Failures = SatAdd(c.Failures, o.Failures)
	c.Errors = SatAdd(c.Errors, o.Errors)
	c.Timeouts = SatAdd(c.Timeouts, o.Timeouts)
	c.Panics = SatAdd(c.Panics, o.Panics)
	c.Slow = SatAdd(c.Slow, o.Slow)
	c.Ignored = SatAdd(c.Ignored, o.Ignored)
	c.RejectedOpen = SatAdd(c.RejectedOpen, o.RejectedOpen)
	c.RejectedHalfOpen = SatAdd(c.RejectedHalfOpen, o.RejectedHalfOpen)
	c.RejectedForced = SatAdd(c.RejectedForced, o.RejectedForced)
	c.RejectedBulkhead = SatAdd(c.RejectedBulkhead, o.RejectedBulkhead)
	c.FallbackSuccess = SatAdd(c.FallbackSuccess, o.FallbackSuccess)
	c.FallbackFailure = SatAdd(c.FallbackFailure, o.FallbackFailure)
	c.Misuse = SatAdd(c.Misuse, o.Misuse)
	c.RejectedRamp = SatAdd(c.RejectedRamp, o.RejectedRamp)
}

// SatAdd returns a+b, saturated at math.MaxInt64 and math.MinInt64
// instead of wrapping.
func SatAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func (c Counts) validate() error {
	for _, f := range []struct {
		n string
		v int64
	}{
		{"admitted", c.Admitted}, {"successes", c.Successes}, {"failures", c.Failures},
		{"errors", c.Errors}, {"timeouts", c.Timeouts}, {"panics", c.Panics},
		{"slow", c.Slow}, {"ignored", c.Ignored}, {"rejected_open", c.RejectedOpen},
		{"rejected_half_open_full", c.RejectedHalfOpen}, {"rejected_forced_open", c.RejectedForced},
		{"rejected_bulkhead", c.RejectedBulkhead}, {"fallback_successes", c.FallbackSuccess},
		{"fallback_failures", c.FallbackFailure}, {"misuse", c.Misuse}, {"rejected_ramp", c.RejectedRamp},
	} {
		if f.v < 0 {
			return fmt.Errorf("counts.%s is negative (%d)", f.n, f.v)
		}
		if f.v > MaxCount {
			return fmt.Errorf("counts.%s is %d, above the largest count of a window (%d)", f.n, f.v, int64(MaxCount))
		}
	}
	if c.Errors+c.Timeouts+c.Panics != c.Failures {
		return fmt.Errorf("counts.failures (%d) is not errors+timeouts+panics (%d)", c.Failures, c.Errors+c.Timeouts+c.Panics)
	}
	return nil
}

// Window is one breaker's report for one period (normally one second).
type Window struct {
	Breaker  string `json:"breaker"`
	Start    int64  `json:"start"`       // Unix ms, start of the period
	Millis   int64  `json:"duration_ms"` // length of the period, > 0
	State    string `json:"state"`       // state at the end of the period
	Counts   Counts `json:"counts"`
	InFlight int64  `json:"in_flight"` // calls in flight at the end of the period
	// Latency is the histogram delta over the period: NumLatencyBuckets
	// counts, bucket i counting calls with latency <= LatencyBoundsMillis[i]
	// (and > the bound before it); the last counts the rest. May be empty
	// when no call ended.
	Latency      []int64  `json:"latency,omitempty"`
	LatencySumMs float64  `json:"latency_sum_ms"` // sum of latencies of the calls counted in Latency
	Headroom     Headroom `json:"headroom"`
	ForcedUntil  int64    `json:"forced_until,omitempty"` // Unix ms; forced states only, 0 = no expiry
	// Hosts is set when the report is a cluster's rather than one
	// instance's: a source reading a Turbine stream, which sums the
	// streams of the cluster's hosts. The counts are then the cluster's,
	// the state is open while one host is open, and Hosts says how many
	// hosts there are and how many are open. nil (absent) for one
	// instance.
	Hosts *Hosts `json:"hosts,omitempty"`
}

// Hosts are the hosts a cluster's window report stands for.
type Hosts struct {
	Total int64 `json:"total"` // hosts reporting, 1..MaxHosts
	Open  int64 `json:"open"`  // of them, those whose circuit is open (0..Total)
}

// valid reports whether h is nil or within its bounds.
func (h *Hosts) valid() bool {
	return h == nil || (h.Total >= 1 && h.Total <= MaxHosts && h.Open >= 0 && h.Open <= h.Total)
}

// Headroom is the breaker's sliding window as it judges it at the end of the
// period, beside the thresholds: how close it is to opening.
type Headroom struct {
	Calls                 int64   `json:"calls"` // recorded calls in the sliding window
	Failures              int64   `json:"failures"`
	Slow                  int64   `json:"slow"`
	MinimumCalls          int64   `json:"minimum_calls"`
	FailureRate           float64 `json:"failure_rate"` // percent, 0 when calls == 0
	FailureRateThreshold  float64 `json:"failure_rate_threshold"`
	SlowCallRate          float64 `json:"slow_call_rate"`           // percent
	SlowCallRateThreshold float64 `json:"slow_call_rate_threshold"` // 0 when slow detection is off
}

// CommandResult is an agent's answer to one Command, sent in a Batch.
type CommandResult struct {
	ID      string `json:"id"`
	Breaker string `json:"breaker"`
	OK      bool   `json:"ok"`
	State   string `json:"state,omitempty"` // the breaker's state after the command
	Error   string `json:"error,omitempty"` // why it was not applied
	At      int64  `json:"at"`              // Unix ms
}

// Welcome is the collector's answer to Hello. LastSeq is the highest batch
// sequence number the collector has stored for this instance and StartedAt;
// the agent drops what it holds up to it and (re)sends the rest.
type Welcome struct {
	Type       string `json:"type"` // "welcome"
	Protocol   int    `json:"protocol"`
	LastSeq    uint64 `json:"last_seq"`
	ServerTime int64  `json:"server_time"` // Unix ms
}

// Ack says every batch with a sequence number <= Seq is stored.
type Ack struct {
	Type string `json:"type"` // "ack"
	Seq  uint64 `json:"seq"`
}

// Error refuses a message. When Seq is set, the batch with that sequence
// number was refused and will never be stored; the agent logs Reason, drops
// that batch and goes on. Fatal errors close the connection: without
// Retry they are permanent (bad token, a token of another service, an
// invalid hello: reconnecting with the same token and hello is refused
// again), with Retry the collector's own trouble or a normal close (store
// error, shutting down, replaced by a newer connection): reconnect with
// backoff.
type Error struct {
	Type   string `json:"type"` // "error"
	Seq    uint64 `json:"seq,omitempty"`
	Reason string `json:"reason"`
	Fatal  bool   `json:"fatal,omitempty"`
	Retry  bool   `json:"retry,omitempty"`
	// RetryAfterMillis, with Fatal and Retry, is when the collector
	// expects to take the agent again, in milliseconds from the error's
	// receipt (for example while its store cannot commit: it probes the
	// store and asks its agents to come back soon rather than at their
	// longest backoff). An agent waits that long, with jitter within
	// [RetryAfterMillis, 1.5*RetryAfterMillis], instead of its own
	// backoff. 0 or absent: the agent's own backoff. An additive field of
	// cbdash.v1 (an older agent ignores it; see CHANGELOG.md).
	RetryAfterMillis int64 `json:"retry_after_ms,omitempty"`
}

// Command is an operator command, collector to agent. An agent applies a
// command ID at most once, and answers with a CommandResult.
type Command struct {
	Type      string `json:"type"` // "command"
	ID        string `json:"id"`
	Breaker   string `json:"breaker"`
	Action    string `json:"action"`           // one of the Action constants
	TTLMillis int64  `json:"ttl_ms,omitempty"` // force_*: 0 = no expiry
	Reason    string `json:"reason,omitempty"`
	Actor     string `json:"actor,omitempty"`
	IssuedAt  int64  `json:"issued_at"`            // Unix ms
	ExpiresAt int64  `json:"expires_at,omitempty"` // Unix ms: not to be applied after this (delivery deadline)
}

// IngestRequest is the body of POST /api/v1/ingest: the hello that names the
// instance, and one batch.
type IngestRequest struct {
	Hello Hello `json:"hello"`
	Batch Batch `json:"batch"`
}

// IngestResponse answers POST /api/v1/ingest.
type IngestResponse struct {
	AckedSeq uint64    `json:"acked_seq"`
	Commands []Command `json:"commands,omitempty"` // pending commands for this instance
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid message")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// CheckName checks a name (a service, instance, breaker or label key, a
// label value, a settings key) as Hello.Validate and Batch.Validate do: not
// blank, at most MaxNameLen bytes, and none of the characters
// checkChars refuses in any text, nor what would make two names that look
// the same on a page name two dependencies: an invisible format character
// (Unicode category Cf: zero-width spaces and joiners U+200B..U+200D,
// the word joiner U+2060, U+FEFF, the soft hyphen U+00AD, the marks
// U+200E, U+200F and U+061C, tags ...), any other Default_Ignorable_Code_Point
// (variation selectors, the combining grapheme joiner U+034F, the Hangul
// fillers), a space other than U+0020 (U+00A0, U+3000, U+2028 ...), a
// blank symbol (U+2800), a leading or trailing space, or a combining mark
// at the start. field names the value in the error, which wraps
// ErrInvalid and gives the code point and its byte offset
// ("breakers[0].name contains the invisible format character U+200B at
// byte 2", "service contains the invisible ignorable character U+034F at
// byte 4").
func CheckName(field, v string) error { return checkName(field, v) }

func checkName(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return invalid("%s is required", field)
	}
	if len(v) > MaxNameLen {
		return invalid("%s is longer than %d bytes", field, MaxNameLen)
	}
	return checkNameChars(field, v)
}

// checkNameChars is checkChars, and refuses what would make a name look
// like another one on a page (lookAlike), which checkChars lets through
// in texts.
func checkNameChars(field, v string) error {
	if err := checkChars(field, v); err != nil {
		return err
	}
	return lookAlike(field, v)
}

// lookAlike refuses, in a name, what shows as nothing or as a plain space
// and so makes two names that look the same on a page name two
// dependencies ("look" and "look\u034f"):
//   - an invisible format character: all of Unicode category Cf;
//   - any other Default_Ignorable_Code_Point (defaultIgnorable: variation
//     selectors, the combining grapheme joiner, the Hangul fillers, the
//     Khmer inherent vowels, reserved ignorable code points);
//   - a space other than U+0020 (category Zs: U+00A0, U+2000..U+200A,
//     U+3000 ...) and the line and paragraph separators (Zl, Zp);
//   - a blank symbol (U+2800 BRAILLE PATTERN BLANK, U+1D159 MUSICAL
//     SYMBOL NULL NOTEHEAD);
//   - a leading or trailing U+0020 ("look " beside "look");
//   - a combining mark (category M) at the very start, which has no
//     letter of the name to combine with and lands on what precedes the
//     name where it is shown.
//
// The error wraps ErrInvalid and names the code point and its byte offset.
func lookAlike(field, v string) error {
	if v == "" {
		return nil
	}
	if v[0] == ' ' {
		return invalid("%s contains the invisible leading space character U+0020 at byte 0", field)
	}
	if v[len(v)-1] == ' ' {
		return invalid("%s contains the invisible trailing space character U+0020 at byte %d", field, len(v)-1)
	}
	for i, r := range v {
		if r < 0xa0 { // ASCII and C1: checkChars has seen them
			continue
		}
		switch {
		case unicode.Is(unicode.Cf, r):
			return invalid("%s contains the invisible format character U+%04X at byte %d", field, r, i)
		case unicode.Is(defaultIgnorable, r):
			return invalid("%s contains the invisible ignorable character U+%04X at byte %d", field, r, i)
		case unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
			return invalid("%s contains the invisible space character U+%04X at byte %d", field, r, i)
		case r == 0x2800 || r == 0x1d159:
			return invalid("%s contains the invisible blank character U+%04X at byte %d", field, r, i)
		case i == 0 && unicode.Is(unicode.M, r):
			return invalid("%s contains the combining mark U+%04X at byte 0, with no letter before it", field, r)
		}
	}
	return nil
}

// defaultIgnorable is Unicode's Default_Ignorable_Code_Point property, as
// DerivedCoreProperties.txt defines it (checked code point by code point
// against Perl's \p{Default_Ignorable_Code_Point} of Unicode 14.0):
//
//	Other_Default_Ignorable_Code_Point + Cf + Variation_Selector
//	  - White_Space - FFF9..FFFB - 13430..1343F - Prepended_Concatenation_Mark
//
// listed range by range (Go's unicode package has no such table). Its
// Cf members are refused as format characters before this table is
// consulted; it is what Cf does not cover that it adds (U+034F, U+115F,
// U+1160, U+17B4, U+17B5, U+180B..U+180D, U+180F, U+2065, U+3164,
// U+FE00..U+FE0F, U+FFA0, U+FFF0..U+FFF8, U+E0000, U+E0002..U+E001F,
// U+E0080..U+E0FFF).
var defaultIgnorable = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x00ad, Hi: 0x00ad, Stride: 1}, // Cf soft hyphen
		{Lo: 0x034f, Hi: 0x034f, Stride: 1}, // Mn combining grapheme joiner
		{Lo: 0x061c, Hi: 0x061c, Stride: 1}, // Cf arabic letter mark
		{Lo: 0x115f, Hi: 0x1160, Stride: 1}, // Lo hangul choseong and jungseong fillers
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1}, // Mn khmer vowel inherent aq, aa
		{Lo: 0x180b, Hi: 0x180f, Stride: 1}, // Mn mongolian free variation selectors; Cf vowel separator
		{Lo: 0x200b, Hi: 0x200f, Stride: 1}, // Cf zero width space, non-joiner, joiner, LRM, RLM
		{Lo: 0x202a, Hi: 0x202e, Stride: 1}, // Cf bidi embeddings and overrides
		{Lo: 0x2060, Hi: 0x206f, Stride: 1}, // Cf word joiner .. nominal digit shapes; Cn 2065
		{Lo: 0x3164, Hi: 0x3164, Stride: 1}, // Lo hangul filler
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1}, // Mn variation selectors 1..16
		{Lo: 0xfeff, Hi: 0xfeff, Stride: 1}, // Cf zero width no-break space (BOM)
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1}, // Lo halfwidth hangul filler
		{Lo: 0xfff0, Hi: 0xfff8, Stride: 1}, // Cn reserved
	},
	R32: []unicode.Range32{
		{Lo: 0x1bca0, Hi: 0x1bca3, Stride: 1}, // Cf shorthand format controls
		{Lo: 0x1d173, Hi: 0x1d17a, Stride: 1}, // Cf musical symbol begin beam .. end phrase
		{Lo: 0xe0000, Hi: 0xe0fff, Stride: 1}, // tags (Cf), variation selectors 17..256 (Mn), reserved (Cn)
	},
	LatinOffset: 1,
}

// checkText checks optional free text (reasons, errors, actors).
func checkText(field, v string) error {
	if len(v) > MaxTextLen {
		return invalid("%s is longer than %d bytes", field, MaxTextLen)
	}
	return checkChars(field, v)
}

// checkChars refuses what would make a name or a text lie or collide when
// shown: invalid UTF-8 (and U+FFFD, what a decoder makes of it or of an
// unpaired surrogate escape, so two names cannot become one), control
// characters (C0, DEL, C1: NUL and the like) and the bidirectional
// overrides and isolates U+202A..U+202E and U+2066..U+2069 (which make
// "pay\u202egnp.exe" display as "payexe.png").
func checkChars(field, v string) error {
	if !utf8.ValidString(v) {
		return invalid("%s is not valid UTF-8", field)
	}
	for i, r := range v {
		switch {
		case r == utf8.RuneError:
			return invalid("%s contains U+FFFD at byte %d (invalid UTF-8 or an unpaired surrogate escape)", field, i)
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return invalid("%s contains the control character U+%04X at byte %d", field, r, i)
		case (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			return invalid("%s contains the bidirectional control U+%04X at byte %d", field, r, i)
		}
	}
	return nil
}

// windowOK reports whether w passes every check Batch.Validate makes of a
// window report (breakers declared in known, nil = any; times against
// ref), without building the field names an error would need.
// declared is the set of breaker names a hello declared (any name when
// there is no hello). A few dozen names are looked up in the hello's own
// list, starting where a batch that keeps the hello's order has its
// window; more are put in a map once per batch.
type declared struct {
	hello *Hello
	m     map[string]bool
}

const declaredScan = 32 // names looked up in the list, not a map

func declaredIn(hello *Hello) declared {
	d := declared{hello: hello}
	if hello != nil && len(hello.Breakers) > declaredScan {
		d.m = make(map[string]bool, len(hello.Breakers))
		for _, c := range hello.Breakers {
			d.m[c.Name] = true
		}
	}
	return d
}

// has reports whether name was declared; hint is where to look first
// (-1: nowhere in particular).
func (d declared) has(name string, hint int) bool {
	switch {
	case d.hello == nil:
		return true
	case d.m != nil:
		return d.m[name]
	}
	bs := d.hello.Breakers
	if hint >= 0 && hint < len(bs) && bs[hint].Name == name {
		return true
	}
	for i := range bs {
		if bs[i].Name == name {
			return true
		}
	}
	return false
}

func windowOK(w *Window, known declared, hint int, ref, floor int64) bool {
	if checkName("", w.Breaker) != nil || !known.has(w.Breaker, hint) || !ValidState(w.State) ||
		checkTime("", w.Start, ref) != nil || w.Millis <= 0 || w.Millis > MaxWindowMillis || w.Start+w.Millis < floor || w.Counts.validate() != nil {
		return false
	}
	inRange := func(v int64) bool { return v >= 0 && v <= MaxCount }
	if !inRange(w.InFlight) || (len(w.Latency) != 0 && len(w.Latency) != NumLatencyBuckets) {
		return false
	}
	for _, n := range w.Latency {
		if !inRange(n) {
			return false
		}
	}
	if v := w.LatencySumMs; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxLatencySumMillis || w.ForcedUntil < 0 || !w.Hosts.valid() {
		return false
	}
	h := &w.Headroom
	if !inRange(h.Calls) || !inRange(h.Failures) || !inRange(h.Slow) || !inRange(h.MinimumCalls) {
		return false
	}
	for _, v := range [...]float64{h.FailureRate, h.FailureRateThreshold, h.SlowCallRate, h.SlowCallRateThreshold} {
		if checkPercent("", v) != nil {
			return false
		}
	}
	return true
}

func checkPercent(field string, v float64) error {
	if math.IsNaN(v) || v < 0 || v > 100 {
		return invalid("%s must be within 0..100 (got %v)", field, v)
	}
	return nil
}

func checkTime(field string, v, now int64) error {
	if v < 0 {
		return invalid("%s is negative", field)
	}
	if now > 0 && v > now+MaxFutureSkewMillis {
		return invalid("%s is %d ms in the future", field, v-now)
	}
	return nil
}

// Validate checks a Hello. It returns an error wrapping ErrInvalid that
// names the bad field. It does not know the time: see ValidateAt.
func (h *Hello) Validate() error {
	if h.Protocol != Version {
		return invalid("protocol %d is not supported (want %d)", h.Protocol, Version)
	}
	if err := checkName("service", h.Service); err != nil {
		return err
	}
	if strings.Contains(h.Service, "/") {
		return invalid("service %q contains a slash (dependencies are named service/breaker)", h.Service)
	}
	if err := checkName("instance", h.Instance); err != nil {
		return err
	}
	if err := checkText("sdk_version", h.SDKVersion); err != nil {
		return err
	}
	if h.StartedAt <= 0 {
		return invalid("started_at is required (Unix ms when the agent started, > 0)")
	}
	if len(h.Labels) > MaxLabels {
		return invalid("more than %d labels", MaxLabels)
	}
	for k, v := range h.Labels {
		if err := checkName("label key", k); err != nil {
			return err
		}
		if strings.TrimSpace(v) == "" {
			return invalid("label %q has a blank value", k)
		}
		if len(v) > MaxNameLen {
			return invalid("label %q is longer than %d bytes", k, MaxNameLen)
		}
		if err := checkNameChars(fmt.Sprintf("label %q", k), v); err != nil {
			return err
		}
	}
	if len(h.Breakers) > MaxBreakersPerHello {
		return invalid("%d breakers (at most %d)", len(h.Breakers), MaxBreakersPerHello)
	}
	seen := make(map[string]bool, len(h.Breakers))
	for i, b := range h.Breakers {
		p := fmt.Sprintf("breakers[%d]", i)
		if err := checkName(p+".name", b.Name); err != nil {
			return err
		}
		if seen[b.Name] {
			return invalid("breaker %q is declared twice", b.Name)
		}
		seen[b.Name] = true
		if err := b.validate(p); err != nil {
			return err
		}
		if len(b.Library) > MaxNameLen {
			return invalid("breakers[%d].library is longer than %d bytes", i, MaxNameLen)
		}
		if err := b.Settings.validate(fmt.Sprintf("breakers[%d].settings", i)); err != nil {
			return err
		}
	}
	return nil
}

// ValidateAt is Validate, and checks started_at against the collector's
// clock now (Unix ms): at most MaxStartedAtAheadMillis ahead.
func (h *Hello) ValidateAt(now int64) error {
	if err := h.Validate(); err != nil {
		return err
	}
	if now > 0 && h.StartedAt > now+MaxStartedAtAheadMillis {
		return invalid("started_at is %d ms ahead of the collector's clock (at most %d)", h.StartedAt-now, MaxStartedAtAheadMillis)
	}
	return nil
}

func (b *BreakerConfig) validate(p string) error {
	// A breaker of another library (Library set) may have no sliding
	// window in our sense: its window_kind may be empty, never unknown.
	if b.WindowKind != WindowCount && b.WindowKind != WindowTime && (b.Library == "" || b.WindowKind != "") {
		return invalid("%s.window_kind %q is not %q or %q", p, truncate(b.WindowKind, 40), WindowCount, WindowTime)
	}
	for _, f := range []struct {
		n string
		v int64
	}{
		{"window_size", int64(b.WindowSize)}, {"window_ms", b.WindowMillis}, {"window_buckets", int64(b.WindowBuckets)},
		{"slow_call_duration_ms", b.SlowCallDurationMillis}, {"minimum_calls", int64(b.MinimumCalls)},
		{"open_duration_ms", b.OpenDurationMillis}, {"open_backoff_max_ms", b.OpenBackoffMaxMillis},
		{"half_open_max_calls", int64(b.HalfOpenMaxCalls)}, {"half_open_success_threshold", int64(b.HalfOpenSuccessThreshold)},
		{"call_timeout_ms", b.CallTimeoutMillis}, {"max_concurrent", int64(b.MaxConcurrent)},
		{"ramp_ms", b.RampMillis},
	} {
		if f.v < 0 {
			return invalid("%s.%s is negative (%d)", p, f.n, f.v)
		}
	}
	if m := b.OpenBackoffMultiplier; math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
		return invalid("%s.open_backoff_multiplier must be a finite number >= 0 (got %v)", p, m)
	}
	if err := checkPercent(p+".failure_rate_threshold", b.FailureRateThreshold); err != nil {
		return err
	}
	if err := checkPercent(p+".slow_call_rate_threshold", b.SlowCallRateThreshold); err != nil {
		return err
	}
	return b.Shadows.validate(p + ".shadows")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Validate checks a Batch against the breakers declared in hello (nil
// skips that check) at server time now (Unix ms; 0 skips the future check).
// Times may be at most MaxFutureSkewMillis ahead of both sent_at and now;
// a window may not end more than MaxFutureSkewMillis before hello's
// started_at (docs/protocol.md, "Clocks"). It returns an error wrapping
// ErrInvalid that names the bad field.
func (b *Batch) Validate(hello *Hello, now int64) error {
	if b.Seq == 0 {
		return invalid("seq is required (starts at 1)")
	}
	if b.Seq > MaxSeq {
		return invalid("seq %d is above the largest sequence number (%d)", b.Seq, int64(MaxSeq))
	}
	if len(b.Transitions) > MaxTransitions {
		return invalid("%d transitions (at most %d)", len(b.Transitions), MaxTransitions)
	}
	if len(b.ShadowTransitions) > MaxTransitions {
		return invalid("%d shadow_transitions (at most %d)", len(b.ShadowTransitions), MaxTransitions)
	}
	if len(b.Windows) > MaxWindows {
		return invalid("%d windows (at most %d)", len(b.Windows), MaxWindows)
	}
	if len(b.CommandResults) > MaxCommandResults {
		return invalid("%d command results (at most %d)", len(b.CommandResults), MaxCommandResults)
	}
	if b.SentAt < 0 {
		return invalid("sent_at is negative")
	}
	if now > 0 && b.SentAt > now+MaxStartedAtAheadMillis {
		return invalid("sent_at is %d ms ahead of the collector's clock (at most %d)", b.SentAt-now, MaxStartedAtAheadMillis)
	}
	// The agent's clock may be ahead of the collector's: the batch's times
	// are judged against its own sent_at then (the collector corrects for
	// the skew), never refused for the skew alone.
	ref := now
	if now > 0 {
		ref = max(now, b.SentAt)
	}
	if d := b.Dropped; d != nil {
		for _, f := range []struct {
			n string
			v int64
		}{{"windows", d.Windows}, {"merged", d.Merged}, {"batches", d.Batches}, {"transitions", d.Transitions}, {"command_results", d.CommandResults}, {"calls", d.Calls}} {
			if f.v < 0 {
				return invalid("dropped.%s is negative (%d)", f.n, f.v)
			}
		}
	}
	// A window reports a period of the agent process that began at the
	// hello's started_at, on the same clock, so a window that ended before
	// it is not one of its periods (a start of 0 or 1970): refused, with
	// MaxFutureSkewMillis of slack for a clock stepped back. (Its start may
	// be earlier: a first report may cover calls counted before.) Skew with
	// the collector does not enter (both times are the agent's).
	var floor int64
	if hello != nil {
		floor = max(hello.StartedAt-MaxFutureSkewMillis, 0)
	}
	known := declaredIn(hello)
	checkBreaker := func(field, name string) error {
		if err := checkName(field, name); err != nil {
			return err
		}
		if !known.has(name, -1) {
			return invalid("%s %q was not declared in hello", field, name)
		}
		return nil
	}
	if err := validateLost(b.Dropped, checkBreaker, ref); err != nil {
		return err
	}
	checkCount := func(field string, v int64) error {
		if v < 0 {
			return invalid("%s is negative (%d)", field, v)
		}
		if v > MaxCount {
			return invalid("%s is %d, above the largest count of a window (%d)", field, v, int64(MaxCount))
		}
		return nil
	}
	for i, t := range b.Transitions {
		if err := t.validate(fmt.Sprintf("transitions[%d]", i), false, checkBreaker, ref); err != nil {
			return err
		}
	}
	for i, t := range b.ShadowTransitions {
		if err := t.validate(fmt.Sprintf("shadow_transitions[%d]", i), true, checkBreaker, ref); err != nil {
			return err
		}
	}
	for i := range b.Windows {
		w := &b.Windows[i]
		if windowOK(w, known, i, ref, floor) {
			continue // the checks below, without naming fields: no allocation
		}
		p := fmt.Sprintf("windows[%d]", i)
		if err := checkBreaker(p+".breaker", w.Breaker); err != nil {
			return err
		}
		if !ValidState(w.State) {
			return invalid("%s.state %q is unknown", p, truncate(w.State, 40))
		}
		if err := checkTime(p+".start", w.Start, ref); err != nil {
			return err
		}
		if w.Millis <= 0 || w.Millis > MaxWindowMillis {
			return invalid("%s.duration_ms must be within 1..%d (got %d)", p, MaxWindowMillis, w.Millis)
		}
		if end := w.Start + w.Millis; end < floor {
			return invalid("%s ended at %d (start %d), %d ms before the agent's started_at %d (at most %d)", p, end, w.Start, hello.StartedAt-end, hello.StartedAt, MaxFutureSkewMillis)
		}
		if err := w.Counts.validate(); err != nil {
			return invalid("%s.%v", p, err)
		}
		if err := checkCount(p+".in_flight", w.InFlight); err != nil {
			return err
		}
		if len(w.Latency) != 0 && len(w.Latency) != NumLatencyBuckets {
			return invalid("%s.latency has %d buckets (want %d)", p, len(w.Latency), NumLatencyBuckets)
		}
		for j, n := range w.Latency {
			if err := checkCount(fmt.Sprintf("%s.latency[%d]", p, j), n); err != nil {
				return err
			}
		}
		if v := w.LatencySumMs; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxLatencySumMillis {
			return invalid("%s.latency_sum_ms must be a finite number within 0..%g (got %v)", p, MaxLatencySumMillis, v)
		}
		if w.ForcedUntil < 0 {
			return invalid("%s.forced_until is negative", p)
		}
		if !w.Hosts.valid() {
			return invalid("%s.hosts must have total within 1..%d and open within 0..total (got %+v)", p, MaxHosts, *w.Hosts)
		}
		h := w.Headroom
		for _, f := range []struct {
			n string
			v int64
		}{{"calls", h.Calls}, {"failures", h.Failures}, {"slow", h.Slow}, {"minimum_calls", h.MinimumCalls}} {
			if err := checkCount(p+".headroom."+f.n, f.v); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			n string
			v float64
		}{{"failure_rate", h.FailureRate}, {"failure_rate_threshold", h.FailureRateThreshold}, {"slow_call_rate", h.SlowCallRate}, {"slow_call_rate_threshold", h.SlowCallRateThreshold}} {
			if err := checkPercent(p+".headroom."+f.n, f.v); err != nil {
				return err
			}
		}
	}
	for i, r := range b.CommandResults {
		p := fmt.Sprintf("command_results[%d]", i)
		if strings.TrimSpace(r.ID) == "" {
			return invalid("%s.id is required", p)
		}
		if err := checkText(p+".id", r.ID); err != nil {
			return err
		}
		if err := checkText(p+".breaker", r.Breaker); err != nil {
			return err
		}
		if r.State != "" && !ValidState(r.State) {
			return invalid("%s.state %q is unknown", p, truncate(r.State, 40))
		}
		if err := checkText(p+".error", r.Error); err != nil {
			return err
		}
		if err := checkTime(p+".at", r.At, ref); err != nil {
			return err
		}
	}
	return nil
}

// validate checks transition t, named p in errors: a shadow one
// (shadow_transitions) names its shadow, a live one does not.
func (t *Transition) validate(p string, shadow bool, checkBreaker func(field, name string) error, ref int64) error {
	if err := checkBreaker(p+".breaker", t.Breaker); err != nil {
		return err
	}
	switch {
	case shadow:
		if err := checkName(p+".shadow", t.Shadow); err != nil {
			return err
		}
	case t.Shadow != "":
		return invalid("%s.shadow is set (%q): a shadow configuration's transition goes in shadow_transitions", p, truncate(t.Shadow, 40))
	}
	if !ValidState(t.From) || !ValidState(t.To) {
		return invalid("%s: unknown state %q > %q", p, truncate(t.From, 40), truncate(t.To, 40))
	}
	if err := checkTime(p+".at", t.At, ref); err != nil {
		return err
	}
	if err := t.Cause.validate(p + ".cause"); err != nil {
		return err
	}
	if t.OpenMillis < 0 {
		return invalid("%s.open_ms is negative", p)
	}
	return nil
}

func (c *Cause) validate(p string) error {
	if strings.TrimSpace(c.Kind) == "" {
		return invalid("%s.kind is required", p)
	}
	for _, f := range []struct{ n, v string }{
		{"kind", c.Kind}, {"probe_outcome", c.ProbeOutcome}, {"command_id", c.CommandID},
		{"action", c.Action}, {"reason", c.Reason}, {"actor", c.Actor},
	} {
		if err := checkText(p+"."+f.n, f.v); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		n string
		v float64
	}{{"failure_rate", c.FailureRate}, {"slow_call_rate", c.SlowCallRate}, {"threshold", c.Threshold}} {
		if err := checkPercent(p+"."+f.n, f.v); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		n string
		v int64
	}{{"window_calls", c.WindowCalls}, {"window_failures", c.WindowFailed}, {"window_slow", c.WindowSlow}, {"expires_at", c.ExpiresAt}} {
		if f.v < 0 {
			return invalid("%s.%s is negative (%d)", p, f.n, f.v)
		}
	}
	return nil
}

// Validate checks a Command. It returns an error wrapping ErrInvalid.
func (c *Command) Validate() error {
	if c.ID == "" {
		return invalid("command id is required")
	}
	if err := checkName("breaker", c.Breaker); err != nil {
		return err
	}
	if !ValidAction(c.Action) {
		return invalid("unknown action %q", c.Action)
	}
	if c.TTLMillis < 0 {
		return invalid("ttl_ms is negative")
	}
	return nil
}

// QuantileMillis estimates the q-quantile (0..1) of a latency histogram
// over LatencyBoundsMillis, in milliseconds, by linear interpolation inside
// the bucket that holds it (as Prometheus' histogram_quantile does); the
// overflow bucket reports the last bound. ok is false for an empty
// histogram.
func QuantileMillis(hist []int64, q float64) (ms float64, ok bool) {
	var total int64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	bounds := LatencyBoundsMillis
	rank := q * float64(total)
	var cum float64
	for i, n := range hist {
		if n == 0 {
			continue
		}
		if cum+float64(n) >= rank {
			if i >= len(bounds) {
				break
			}
			lower := 0.0
			if i > 0 {
				lower = bounds[i-1]
			}
			return lower + (bounds[i]-lower)*(rank-cum)/float64(n), true
		}
		cum += float64(n)
	}
	return bounds[len(bounds)-1], true
}
