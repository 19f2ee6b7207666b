// Package cbdash holds the domain types of the cbdash server: dependencies
// (a breaker of a service, aggregated over its instances), their history,
// transitions, operator commands and holds, the live events the dashboard
// shows, users and API tokens, incidents and their notes, alert rules and
// deliveries, and configuration changes; and the domain's rules (which
// rates are shown, how close a window is to opening, state order). The
// words and numbers a person reads of them (percentages, rates against
// thresholds, spans, states) are internal/wording's.
//
// It depends on nothing but the standard library and the wire protocol
// types of the SDK. Implementations live in internal/: store (SQLite or
// PostgreSQL, the one place that knows SQL), ingest (the agents'
// transports, decoding, limits and the pipeline from a batch to "stored,
// applied, acked"), live (live state, its views and the hub), holds
// (holds, drill statistics and reports), collector (wires ingest, live
// and holds, routes commands, leads compaction), cluster (the bus between
// collectors), web (every HTTP route: the dashboard and its JSON API),
// incident (incidents from transitions, their reports), alert (rules and
// webhooks), source (Hystrix, Prometheus and OpenTelemetry feeds), demo (a
// simulated fleet), loadgen (simulated agents for load tests), wording
// (what a person reads) and clock (the server's one clock); wiring lives
// only in cmd/cbdash. Tests share clocktest, eventually, storetest and
// stacktest. All types are plain values, safe to copy; none has methods
// that mutate shared state.
package cbdash

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Errors shared by every server package. Wrap them with %w; the HTTP
// layer maps them to statuses (404, 400, 401, 403, 409, 503) in one
// place. ErrUnavailable is a refusal for now (the collector is starting,
// or the store cannot commit): retry later; its message is the reason
// before ": unavailable".
var (
	ErrNotFound     = errors.New("not found")
	ErrInvalid      = errors.New("invalid input")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrConflict     = errors.New("conflict")
	ErrUnavailable  = errors.New("unavailable")
)

// Roles of dashboard users, from least to most privileged.
const (
	RoleViewer   = "viewer"   // reads everything
	RoleOperator = "operator" // also issues commands
	RoleAdmin    = "admin"    // also manages users and agent tokens
)

// DependencyKey names a dependency: one breaker name within one service,
// across all instances of that service.
type DependencyKey struct {
	Service string `json:"service"`
	Breaker string `json:"breaker"`
}

// String returns "service/breaker".
func (k DependencyKey) String() string { return k.Service + "/" + k.Breaker }

// Hold describes an operator command that holds a breaker in a forced
// state (force_open or force_closed).
type Hold struct {
	CommandID string    `json:"command_id"`
	HoldID    string    `json:"hold_id,omitempty"` // the stored hold (HoldRecord) the command applied, if any
	Action    string    `json:"action"`            // protocol.ActionForceOpen or ActionForceClosed
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason"`
	Until     time.Time `json:"until"` // zero = no expiry
}

// InstanceBreaker is the live state of one breaker on one instance.
type InstanceBreaker struct {
	Service  string            `json:"service"`
	Instance string            `json:"instance"`
	Breaker  string            `json:"breaker"`
	Labels   map[string]string `json:"labels,omitempty"`
	// State is the last state the instance reported (protocol.State*).
	State string `json:"state"`
	// Stale is true when the instance has not reported for the stale
	// timeout; a stale instance is not counted in its dependency's state.
	Stale          bool      `json:"stale"`
	LastSeen       time.Time `json:"last_seen"`
	LastTransition time.Time `json:"last_transition"`
	// OpenSince is when the current episode out of closed began: the
	// transition from closed (or forced closed) into open, half-open or
	// forced open that started the stretch the breaker is still in, not
	// the last half-open probe. Zero while closed or forced closed.
	OpenSince time.Time `json:"open_since,omitzero"`
	// Config is the breaker's configuration from the instance's hello;
	// ConfigDiffers is true when it differs from the other instances'.
	// Config points at an immutable value, shared by the lines of the
	// instance's breaker until its next hello, by those of instances
	// whose hellos declare the same breakers alike, and with the
	// collector's own state: compare configurations by value (*a == *b),
	// never by pointer, and copy one before changing it. Never nil in the
	// collector's lines (a zero configuration before the hello); nil in
	// the store's (store.Instances) only when the stored one is JSON null.
	Config        *protocol.BreakerConfig `json:"config"`
	ConfigDiffers bool                    `json:"config_differs"`
	// Last is the last window report (normally one second). It points at
	// an immutable value, the window as the collector applied it (shared
	// with the decoded batch and the instance's later lines until its
	// next report): copy it before changing it. Never nil in the
	// collector's lines (a zero window before the first report); nil in
	// lines that have no live state (store.Instances leaves it so).
	Last *protocol.Window `json:"last"`
	Held *Hold            `json:"held,omitempty"`
	// LastTrip is the instance's last closed > open transition seen live
	// (its cause says which rate tripped it, and the window then); nil
	// when none was seen since the collector started.
	LastTrip *protocol.Transition `json:"last_trip,omitempty"`
	// LastTripReceivedAt is when the collector received LastTrip: trips
	// of several instances are ordered by it (their agents' clocks
	// differ). Zero with LastTrip nil.
	LastTripReceivedAt time.Time `json:"last_trip_received_at,omitzero"`
	// ClockSkewMillis is the instance's agent clock minus the collector's,
	// in milliseconds, measured from its batches (sent_at against receipt,
	// so it includes the network delay); 0 until measured. An agent more
	// than a second ahead has its times moved to the collector's clock.
	ClockSkewMillis int64 `json:"clock_skew_ms"`
	// Shown are the rates the dashboard and the CLI show for the instance
	// (InstanceRatesOf): at its trip while tripped, else its window.
	Shown ShownRates `json:"shown"`
	// Elsewhere is true for a line of an instance served by another
	// collector (several collectors sharing one store, issue 36), read
	// from the store (store.Instances): its state, labels, configuration,
	// last transition and last-seen time are the store's; its window and
	// rates are known only on the collector serving it, so Last is a zero
	// window and Shown says nothing of its calls. False (absent in JSON)
	// for the lines of the instances served here.
	Elsewhere bool `json:"served_elsewhere,omitempty"`
}

// Dependency is the live state of one breaker name of one service,
// aggregated across the service's instances. Rates are recomputed from
// summed counts, never averaged; percentiles come from merged histograms.
type Dependency struct {
	DependencyKey
	// State is the worst state over live (non-stale) instances, in the
	// order open, half_open, forced_open, forced_closed, closed; "" when
	// no instance is live.
	State     string            `json:"state"`
	ByState   map[string]int    `json:"by_state"` // live instances per state
	Instances int               `json:"instances"`
	Stale     int               `json:"stale"`
	Labels    map[string]string `json:"labels,omitempty"` // labels shared by all instances
	// Recent sums the last minute of window reports of all instances.
	Recent       protocol.Counts `json:"recent"`
	RequestRate  float64         `json:"request_rate"`   // calls per second (admitted + rejected) over Recent
	AdmittedRate float64         `json:"admitted_rate"`  // admitted calls per second over Recent
	RejectedRate float64         `json:"rejected_rate"`  // rejected calls per second over Recent (open, half-open full, forced, bulkhead)
	FailureRate  float64         `json:"failure_rate"`   // percent of recorded calls in Recent
	SlowCallRate float64         `json:"slow_call_rate"` // percent of recorded calls in Recent
	// Headroom is the sliding window of the instance closest to opening
	// (highest Closeness score); Closeness is ClosenessOf(Headroom).
	Headroom  protocol.Headroom `json:"headroom"`
	Closeness Closeness         `json:"closeness"`
	// Shown are the failure and slow-call rates the dashboard's tile and
	// the CLI show (RatesOf): the window while closed, the rates at the
	// trip while open or half-open ("tripped at 55% of 50%").
	Shown ShownRates `json:"shown"`
	// P50 and P99 are latency percentiles over Recent as Go durations
	// (nanoseconds in JSON, kept for compatibility); P50Millis and
	// P99Millis are the same in milliseconds.
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	P50Millis  float64       `json:"p50_ms"`
	P99Millis  float64       `json:"p99_ms"`
	OpensToday int           `json:"opens_today"` // trips (closed > open) on any instance since midnight UTC
	Held       *Hold         `json:"held,omitempty"`
	LastChange time.Time     `json:"last_change"`
	// OpenSince is the earliest OpenSince of the live instances that are
	// not closed: how long the dependency has been in trouble. Zero when
	// every live instance is closed (or forced closed).
	OpenSince time.Time `json:"open_since,omitzero"`
	// Fallback is when the dependency's fallbacks last served calls its
	// open or forced-open breakers rejected, and how well; nil when they
	// have not since the collector started (live state only).
	Fallback *FallbackRun `json:"fallback,omitempty"`
	// PerInstance has one line per instance, stale ones included (in
	// instance order in the collector's views), never a nil element.
	// The lines are shared and read-only: the collector gives the same
	// pointers to every view and subscriber of the dependency, keeps
	// them in the views that follow while an instance reports nothing
	// new, and builds a new line rather than change one it has handed
	// out. Reordering or re-slicing a copy of the slice is fine; to change
	// a line, copy it first (c := *ib), and clone its Labels, Held,
	// LastTrip, Config or Last (and Last.Latency) before changing what
	// they point to (they are shared too).
	PerInstance []*InstanceBreaker `json:"per_instance"`
	// TripElsewhere is the trip cause of a live tripped instance that
	// another collector serves (it has no line in PerInstance, issue 36):
	// RatesOf shows the rates at the trip from it when no line's trip is
	// known. Live state only, never in JSON; nil when none is known.
	TripElsewhere *protocol.Cause `json:"-"`
}

// Resolution is the granularity of stored history.
type Resolution string

// Resolutions of the roll-ups, each with its own retention.
const (
	ResolutionSecond Resolution = "second"
	ResolutionMinute Resolution = "minute"
	ResolutionHour   Resolution = "hour"
)

// Point is one bucket of a dependency's history, summed over instances.
//
// In JSON, "width" is Width in nanoseconds (deprecated since API 1.2.0)
// and "width_ms" the same in milliseconds, the API's unit for durations.
type Point struct {
	At           time.Time       `json:"at"`    // start of the bucket
	Width        time.Duration   `json:"width"` // bucket width
	Counts       protocol.Counts `json:"counts"`
	Latency      []int64         `json:"latency,omitempty"` // merged histogram, protocol.LatencyBoundsMillis
	LatencySumMs float64         `json:"latency_sum_ms"`
	InFlight     int64           `json:"in_flight"`      // max over the bucket
	Open         int             `json:"open_instances"` // instances that reported a non-closed state in the bucket
	// Reports is how many window reports the bucket merges: for a second,
	// the instances that reported it (one report per instance and second
	// normally); for a minute or an hour, instance-seconds.
	Reports int64 `json:"reports"`
}

// Gap is time of a dependency's history without the data of one
// instance: its agent dropped the window reports under memory pressure
// (protocol Dropped.Lost) and reported what they counted.
type Gap struct {
	Instance string    `json:"instance"`
	From     time.Time `json:"from"`       // start of the lost time
	To       time.Time `json:"to"`         // its end (exclusive)
	Calls    int64     `json:"lost_calls"` // calls (admitted and rejected) the dropped reports counted
}

// HistoryQuery selects a dependency's history.
type HistoryQuery struct {
	DependencyKey
	Instance   string     // "" = all instances
	From, To   time.Time  // [From, To)
	Resolution Resolution // "" = chosen from the range
}

// TransitionRecord is a stored transition of one breaker on one instance.
// In JSON, "at" is the agent's time in Unix milliseconds (as on the
// wire) and "at_time" the same instant in RFC 3339, like "received_at".
type TransitionRecord struct {
	ID       int64  `json:"id"`
	Service  string `json:"service"`
	Instance string `json:"instance"`
	protocol.Transition
	ReceivedAt time.Time `json:"received_at"`
}

// MarshalJSON adds "at_time" (At in RFC 3339, UTC) to the record's
// fields.
func (r TransitionRecord) MarshalJSON() ([]byte, error) {
	type plain TransitionRecord // without this method
	return json.Marshal(struct {
		plain
		AtTime time.Time `json:"at_time"`
	}{plain(r), time.UnixMilli(r.At).UTC()})
}

// MarshalJSON adds "width_ms" (Width in milliseconds) to the point's
// fields.
func (p Point) MarshalJSON() ([]byte, error) {
	type plain Point // without this method
	return json.Marshal(struct {
		plain
		WidthMillis int64 `json:"width_ms"`
	}{plain(p), p.Width.Milliseconds()})
}

// MarshalJSON adds "ttl_ms" (TTL in milliseconds; "ttl" is nanoseconds,
// deprecated since API 1.2.0) to the command's fields.
func (c Command) MarshalJSON() ([]byte, error) {
	type plain Command // without this method
	return json.Marshal(struct {
		plain
		TTLMillis int64 `json:"ttl_ms"`
	}{plain(c), c.TTL.Milliseconds()})
}

// TransitionQuery selects transitions, newest first. Empty fields match all.
type TransitionQuery struct {
	Service, Breaker, Instance string
	From, To                   time.Time
	Limit                      int // 0 = 500
}

// CommandRequest is what an operator asks for.
type CommandRequest struct {
	Service string `json:"service"`
	Breaker string `json:"breaker"`
	Action  string `json:"action"` // protocol.Action*
	// Scope: Instance names one instance; otherwise Share (percent, 0 or
	// 100 = all) picks that share of the live instances.
	Instance string        `json:"instance,omitempty"`
	Share    float64       `json:"share,omitempty"`
	TTL      time.Duration `json:"ttl"` // required for force_* actions
	Reason   string        `json:"reason"`
	Actor    string        `json:"actor"`
}

// Command target statuses.
const (
	TargetPending = "pending" // recorded, not yet acknowledged by the instance
	TargetApplied = "applied"
	TargetFailed  = "failed"
	TargetExpired = "expired" // the instance did not come back before the command expired
)

// CommandTarget is one instance a command was sent to, with its result.
type CommandTarget struct {
	Instance string    `json:"instance"`
	Status   string    `json:"status"`
	State    string    `json:"state,omitempty"` // breaker state after the command
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at,omitzero"` // when the instance answered; absent while pending
}

// Command is a recorded operator command: the audit log entry.
type Command struct {
	ID string `json:"id"`
	CommandRequest
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // forced state ends (absent = none: release, reset)
	// HoldID names the hold this command applies or releases; "" for a
	// command of its own (a reset, a release of no hold).
	HoldID  string          `json:"hold_id,omitempty"`
	Targets []CommandTarget `json:"targets"`
}

// CommandQuery selects commands, newest first.
type CommandQuery struct {
	Service, Breaker string
	Limit            int // 0 = 200
}

// Event kinds published to live subscribers.
const (
	EventDependency = "dependency" // a dependency's live state changed
	EventTransition = "transition"
	EventCommand    = "command" // a command was issued or a target answered
	// EventDrillStopped: a stop condition released a hold (Event.Hold,
	// with its Breach).
	EventDrillStopped = "drill_stopped"
)

// Event is a live change, fanned out to dashboard subscribers.
type Event struct {
	Kind       string            `json:"kind"`
	At         time.Time         `json:"at"`
	Dependency *Dependency       `json:"dependency,omitempty"`
	Transition *TransitionRecord `json:"transition,omitempty"`
	Command    *Command          `json:"command,omitempty"`
	Hold       *HoldRecord       `json:"hold,omitempty"` // EventDrillStopped
}

// User is a dashboard account. Its password hash and session or API
// token secrets never leave the store and the web package.
type User struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Role      string    `json:"role"` // RoleViewer, RoleOperator or RoleAdmin
	CreatedAt time.Time `json:"created_at"`
	// Disabled accounts cannot log in; their sessions and API tokens are
	// refused (401) from the moment they are disabled.
	Disabled bool `json:"disabled"`
}

// ValidRole reports whether r is one of the Role constants.
func ValidRole(r string) bool {
	return r == RoleViewer || r == RoleOperator || r == RoleAdmin
}

// RoleAllows reports whether a user with role has at least the privileges
// of need (viewer < operator < admin). Unknown roles allow nothing.
func RoleAllows(role, need string) bool {
	rank := map[string]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}
	return rank[role] > 0 && rank[role] >= rank[need]
}

// APIToken describes a user API token (used by the CLI as a Bearer
// token). The secret itself is shown once at creation and stored hashed.
type APIToken struct {
	ID        int64     `json:"id"`
	UserID    int64     `json:"user_id"`
	User      string    `json:"user"` // the account's name
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// LastUsed is zero when never used; it is updated at most once a
	// minute.
	LastUsed time.Time `json:"last_used"`
	// ExpiresAt is zero for a token that does not expire; from then on the
	// token is refused.
	ExpiresAt time.Time `json:"expires_at"`
}

// Account log actions (AccountEvent.Action).
const (
	AccountUserAdd         = "user add"
	AccountUserPassword    = "user passwd"
	AccountUserRole        = "user role"
	AccountUserDisable     = "user disable"
	AccountUserEnable      = "user enable"
	AccountUserDelete      = "user delete"
	AccountTokenCreate     = "token create"
	AccountTokenRevoke     = "token revoke"
	AccountTokenExpire     = "token expire"
	AccountAgentToken      = "agent token create"
	AccountAgentRevoke     = "agent token revoke"
	AccountAgentExpire     = "agent token expire"
	AccountUserTokensEnded = "user tokens revoke"
)

// AccountEvent is one entry of the account log: who changed which
// account or token, and how. The log is append-only.
type AccountEvent struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`   // a user name, or "cli" for the command line on the server's machine
	Action  string    `json:"action"`  // one of the Account* constants
	Subject string    `json:"subject"` // a user name or a token ID
	Detail  string    `json:"detail,omitempty"`
}

// NotClosed reports whether a breaker state is out of closed: open,
// half_open or forced_open (an episode OpenSince measures).
func NotClosed(s string) bool {
	return s == protocol.StateOpen || s == protocol.StateHalfOpen || s == protocol.StateForcedOpen
}

// StateRank orders breaker states worst first, as Dependency.State
// documents: open 0, half_open 1, forced_open 2, forced_closed 3,
// closed 4, anything else 5.
func StateRank(s string) int {
	switch s {
	case protocol.StateOpen:
		return 0
	case protocol.StateHalfOpen:
		return 1
	case protocol.StateForcedOpen:
		return 2
	case protocol.StateForcedClosed:
		return 3
	case protocol.StateClosed:
		return 4
	}
	return 5
}
