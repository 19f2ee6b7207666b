package cbdash

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// AnyService is the Selector.Service that matches every service: "*/inventory"
// is the breaker named inventory in every service that has one.
const AnyService = "*"

// DefaultMaxHold is the longest hold a server accepts unless configured
// otherwise (cbdash serve --max-hold).
const DefaultMaxHold = 24 * time.Hour

// Selector says which breakers of which instances a hold covers. A breaker
// is covered when its name is Breaker, its service is Service (or Service
// is AnyService), and its instance passes every narrowing that is set:
// it has every label in Labels, it is one of Instances, and it falls in
// Share by its stable hash (see InShare). The zero value of each narrowing
// (nil, empty, 0) narrows nothing.
type Selector struct {
	Service   string            `json:"service"` // a service name or AnyService
	Breaker   string            `json:"breaker"`
	Labels    map[string]string `json:"labels,omitempty"`
	Instances []string          `json:"instances,omitempty"`
	// Share is a percent of the instances, 0..100 (0 or 100 = all),
	// chosen by the instance id's hash, so a share stays a share as the
	// fleet changes and an instance restarted under the same id keeps its
	// side.
	Share float64 `json:"share,omitempty"`
}

// ParseSelector reads "service/breaker" or "*/breaker". Errors wrap
// ErrInvalid and quote the input.
func ParseSelector(s string) (Selector, error) {
	svc, br, ok := strings.Cut(s, "/")
	if !ok || strings.TrimSpace(svc) == "" || strings.TrimSpace(br) == "" || strings.Contains(br, "/") {
		return Selector{}, fmt.Errorf("%w: target %q is not SERVICE/BREAKER or */BREAKER", ErrInvalid, s)
	}
	return Selector{Service: svc, Breaker: br}, nil
}

// Validate checks the selector; errors wrap ErrInvalid and name the field.
func (s Selector) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: selector: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case strings.TrimSpace(s.Service) == "":
		return bad("service is required (a name or %q for every service)", AnyService)
	case strings.TrimSpace(s.Breaker) == "":
		return bad("breaker is required")
	case len(s.Service) > protocol.MaxNameLen || len(s.Breaker) > protocol.MaxNameLen:
		return bad("service and breaker are at most %d bytes", protocol.MaxNameLen)
	case math.IsNaN(s.Share) || s.Share < 0 || s.Share > 100:
		return bad("share must be within 0..100 (percent)")
	case len(s.Labels) > protocol.MaxLabels:
		return bad("at most %d labels", protocol.MaxLabels)
	case len(s.Instances) > 1000:
		return bad("at most 1000 instances")
	}
	for k := range s.Labels {
		if strings.TrimSpace(k) == "" {
			return bad("a label key is empty")
		}
	}
	for _, i := range s.Instances {
		if strings.TrimSpace(i) == "" {
			return bad("an instance name is empty")
		}
	}
	// What no agent may name (protocol.CheckName: control, bidirectional,
	// invisible or look-alike characters) cannot be held: a hold on a
	// look-alike of a dependency would cover nothing.
	names := []struct{ field, v string }{{"breaker", s.Breaker}}
	if s.Service != AnyService {
		names = append(names, struct{ field, v string }{"service", s.Service})
	}
	for k, v := range s.Labels {
		names = append(names, struct{ field, v string }{"label key", k})
		if strings.TrimSpace(v) != "" {
			names = append(names, struct{ field, v string }{fmt.Sprintf("label %q", k), v})
		}
	}
	for _, i := range s.Instances {
		names = append(names, struct{ field, v string }{"instance", i})
	}
	for _, n := range names {
		if err := protocol.CheckName(n.field, n.v); err != nil {
			return bad("%s", strings.TrimPrefix(err.Error(), protocol.ErrInvalid.Error()+": "))
		}
	}
	return nil
}

// String writes the selector the way the CLI reads it:
// "*/inventory region=eu instances=a,b share=50%".
func (s Selector) String() string {
	var b strings.Builder
	b.WriteString(s.Service + "/" + s.Breaker)
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		b.WriteString(" " + k + "=" + s.Labels[k])
	}
	if len(s.Instances) > 0 {
		b.WriteString(" instances=" + strings.Join(s.Instances, ","))
	}
	if s.partial() {
		b.WriteString(" share=" + strconv.FormatFloat(s.Share, 'f', -1, 64) + "%")
	}
	return b.String()
}

func (s Selector) partial() bool { return s.Share > 0 && s.Share < 100 }

// CoversDependency reports whether the selector can cover breakers of k
// (service and breaker name; instance narrowings aside).
func (s Selector) CoversDependency(k DependencyKey) bool {
	return s.Breaker == k.Breaker && (s.Service == AnyService || s.Service == k.Service)
}

// InstanceRef is what selector matching knows of an instance.
type InstanceRef struct {
	Service  string
	Instance string
	Labels   map[string]string
}

// Matches reports whether the selector covers breaker on inst.
func (s Selector) Matches(inst InstanceRef, breaker string) bool {
	if !s.CoversDependency(DependencyKey{Service: inst.Service, Breaker: breaker}) {
		return false
	}
	for k, v := range s.Labels {
		if got, ok := inst.Labels[k]; !ok || got != v {
			return false
		}
	}
	if len(s.Instances) > 0 && !slices.Contains(s.Instances, inst.Instance) {
		return false
	}
	return !s.partial() || InShare(inst.Instance, s.Share)
}

// ShareBucket places an instance id on a scale of 0 (inclusive) to 100
// (exclusive) by a stable hash (FNV-1a, 64 bit) of the id alone: the same
// id always gets the same bucket, whatever the rest of the fleet is.
func ShareBucket(instance string) float64 {
	h := fnv.New64a()
	h.Write([]byte(instance))
	return float64(h.Sum64()%10000) / 100
}

// InShare reports whether instance falls within share percent (0 or 100 =
// every instance): its ShareBucket is below share.
func InShare(instance string, share float64) bool {
	if share <= 0 || share >= 100 {
		return true
	}
	return ShareBucket(instance) < share
}

// HoldRequest is what an operator asks for when holding breakers in a
// forced state.
type HoldRequest struct {
	Selector Selector `json:"selector"`
	// Action is protocol.ActionForceOpen or protocol.ActionForceClosed.
	Action string `json:"action"`
	// TTL is how long the hold lasts, > 0 and at most the server's
	// maximum hold duration.
	TTL    time.Duration `json:"ttl"`
	Reason string        `json:"reason"`
	Actor  string        `json:"actor"`
	// StopIf adds stop conditions to the server's defaults (cbdash serve
	// --stop-if): any one breached releases the hold everywhere at once.
	StopIf []StopCondition `json:"stop_if,omitempty"`
	// DropStops names server default stop conditions this hold does
	// without, each as the server lists it ("*" = all of them); DropReason
	// is then required (it is kept with the hold, the audit log).
	DropStops  []string `json:"drop_stop_if,omitempty"`
	DropReason string   `json:"drop_reason,omitempty"`
	// Steps, when set, steps the share of instances covered (see
	// HoldStep); Selector.Share must then be 0.
	Steps []HoldStep `json:"steps,omitempty"`
}

// Validate checks the request against maxHold (0 = DefaultMaxHold); errors
// wrap ErrInvalid and name the field (and the limit).
func (r HoldRequest) Validate(maxHold time.Duration) error {
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if err := r.Selector.Validate(); err != nil {
		return err
	}
	switch {
	case r.Action != protocol.ActionForceOpen && r.Action != protocol.ActionForceClosed:
		return bad("action %q is not force_open or force_closed", truncate(r.Action, 40))
	case r.TTL <= 0:
		return bad("ttl is required: a hold always ends by itself")
	case r.TTL > maxHold:
		return bad("ttl %v is longer than the maximum hold duration %v (--max-hold)", r.TTL, maxHold)
	case strings.TrimSpace(r.Reason) == "":
		return bad("reason is required: it goes into the audit log")
	case len(r.Reason) > 1000:
		return bad("reason is longer than 1000 bytes")
	case len(r.Actor) > protocol.MaxNameLen:
		return bad("actor is longer than %d bytes", protocol.MaxNameLen)
	}
	if err := r.validateStops(); err != nil {
		return err
	}
	return CheckText("reason", r.Reason, false)
}

// validateStops checks StopIf, DropStops and DropReason.
func (r HoldRequest) validateStops() error {
	if len(r.StopIf) > 10 || len(r.DropStops) > 10 {
		return fmt.Errorf("%w: at most 10 stop conditions and 10 dropped ones", ErrInvalid)
	}
	for _, c := range r.StopIf {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("stop_if %q: %w", c.String(), err)
		}
	}
	if err := ValidateSteps(r.Steps); err != nil {
		return err
	}
	if len(r.Steps) > 0 && r.Selector.partial() {
		return fmt.Errorf("%w: a stepped drill sets its share by its steps: selector share must be 0", ErrInvalid)
	}
	if len(r.DropStops) > 0 && strings.TrimSpace(r.DropReason) == "" {
		return fmt.Errorf("%w: drop_reason is required to drop default stop conditions: it goes into the audit log", ErrInvalid)
	}
	if len(r.DropReason) > 1000 {
		return fmt.Errorf("%w: drop_reason is longer than 1000 bytes", ErrInvalid)
	}
	return CheckText("drop_reason", r.DropReason, false)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// HoldRecord is a stored hold: desired state that the collector applies to
// every instance it covers, including instances that say hello later,
// until Until or until it is released.
type HoldRecord struct {
	ID string `json:"id"`
	HoldRequest
	CreatedAt time.Time `json:"created_at"`
	Until     time.Time `json:"until"`
	// Released* are set when an operator ended the hold before Until.
	ReleasedAt    time.Time `json:"released_at,omitzero"`
	ReleasedBy    string    `json:"released_by,omitempty"`
	ReleaseReason string    `json:"release_reason,omitempty"`
	// Stops is the stop conditions in force, fixed at creation: the
	// server's defaults less DropStops, then StopIf (EffectiveStops).
	Stops []StopCondition `json:"stops"`
	// Breach is set when a stop condition released the hold (its
	// ReleaseReason is then Breach.Reason()).
	Breach *HoldBreach `json:"breach,omitempty"`
	// Step is, for a stepped hold, the step (from 1) the collector has
	// let it reach: a step begins once its time has come and no stop
	// condition was breached. 0 (as stored) is the first step.
	Step int `json:"step,omitempty"`
	// Coverage lists every instance breaker the hold was applied to, with
	// the breaker's answer; filled by the store's Hold and Holds.
	Coverage []HoldCoverage `json:"coverage"`
}

// Covering is the selector the hold covers with now: Selector, with the
// share of its step (Step; the first when 0) for a stepped hold.
func (h HoldRecord) Covering() Selector {
	sel := h.Selector
	if len(h.Steps) > 0 {
		sel.Share = h.Steps[min(max(h.Step, 1), len(h.Steps))-1].Share
	}
	return sel
}

// MarshalJSON adds "ttl_ms" (TTL in milliseconds; "ttl" is nanoseconds,
// deprecated since API 1.2.0) and "end" (End: the hold's one end, its
// release or its expiry) to the hold's fields.
func (h HoldRecord) MarshalJSON() ([]byte, error) {
	type plain HoldRecord // without this method
	return json.Marshal(struct {
		plain
		TTLMillis int64     `json:"ttl_ms"`
		End       time.Time `json:"end"`
	}{plain(h), h.TTL.Milliseconds(), h.End()})
}

// LiveAt reports whether the hold is in force at t: created, not
// released, not expired.
func (h HoldRecord) LiveAt(t time.Time) bool {
	return !t.Before(h.CreatedAt) && t.Before(h.Until) && (h.ReleasedAt.IsZero() || t.Before(h.ReleasedAt))
}

// End is when the hold ended or will end: its release or its expiry.
func (h HoldRecord) End() time.Time {
	if !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until) {
		return h.ReleasedAt
	}
	return h.Until
}

// Superseded reports whether other takes precedence over h where both
// match one breaker: the most recently created hold wins (ties: the
// greater ID). This is the one precedence rule; see Governing.
func (h HoldRecord) Superseded(other HoldRecord) bool {
	if !other.CreatedAt.Equal(h.CreatedAt) {
		return other.CreatedAt.After(h.CreatedAt)
	}
	return other.ID > h.ID
}

// Governing returns the hold that decides the state of breaker on inst at
// t among holds: of those live at t whose selector matches (Covering: a
// stepped hold's at its step), the most recently created
// (HoldRecord.Superseded). ok is false when none does:
// the breaker runs on its own.
func Governing(holds []HoldRecord, inst InstanceRef, breaker string, t time.Time) (h HoldRecord, ok bool) {
	for _, c := range holds {
		if !c.LiveAt(t) || !c.Covering().Matches(inst, breaker) {
			continue
		}
		if !ok || h.Superseded(c) {
			h, ok = c, true
		}
	}
	return h, ok
}

// HoldCoverage is one instance breaker a hold was applied to.
type HoldCoverage struct {
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Breaker  string `json:"breaker"`
	// StartedAt is the agent process's start (Unix ms, from its hello):
	// an instance restarted under the same id is covered again.
	StartedAt int64 `json:"started_at"`
	// CommandID is the command the hold was sent as.
	CommandID string `json:"command_id"`
	// CoveredAt is when the collector sent the hold to the instance.
	CoveredAt time.Time `json:"covered_at"`
	// JoinedLate is true when the instance said hello after the hold was
	// created (a new instance, or a restart).
	JoinedLate bool `json:"joined_late"`
	// Status, State, Error and AnsweredAt are the breaker's answer
	// (TargetPending until it comes).
	Status     string    `json:"status"`
	State      string    `json:"state,omitempty"`
	Error      string    `json:"error,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
}

// HoldDelivery is one instance breaker's part of applying a hold (or its
// release), as the store records it in one write with others (see the
// store's ApplyHold): the command the hold is sent as, the instance as
// one of its targets, and, for a hold, the coverage row that records it.
type HoldDelivery struct {
	// Command is created, with Target as its first target, when no
	// command of its id is stored; otherwise Target is added to the
	// stored one (its other fields are then ignored).
	Command Command
	// Target is recorded as a target of Command, replacing one of the
	// same instance.
	Target CommandTarget
	// Coverage, when set, is recorded for hold Command.HoldID (replacing
	// the row of an earlier send to the same agent process); nil for a
	// release.
	Coverage *HoldCoverage
}

// HoldQuery selects holds, newest first.
type HoldQuery struct {
	// LiveAt, when set, keeps the holds live at that time.
	LiveAt time.Time
	Limit  int // 0 = 200
}

// HoldOfCommand returns the hold a command was sent for, from the command
// id the collector gave it ("<hold id>-<suffix>"); ok is false for a
// command that is not a hold's.
func HoldOfCommand(commandID string) (holdID string, ok bool) {
	if !strings.HasPrefix(commandID, "h") {
		return "", false
	}
	id, _, ok := strings.Cut(commandID, "-")
	if !ok || len(id) < 2 {
		return "", false
	}
	return id, true
}

// HoldPlan is the blast radius of a hold: what it would cover now.
type HoldPlan struct {
	Selector Selector `json:"selector"`
	Action   string   `json:"action"`
	// Services that have a matching breaker on a live instance, sorted.
	Services []string `json:"services"`
	// Instances matching now, by "service/instance", sorted.
	Instances []string `json:"instances"`
	// Eligible counts the live instances with the breaker and the
	// selector's labels, before the share and instance narrowings:
	// Instances/Eligible is the share actually reached.
	Eligible int `json:"eligible"`
	// CallsPerSecond is the calls per second the matching breakers
	// passed or rejected in their last report: what force open rejects.
	CallsPerSecond float64 `json:"calls_per_second"`
	// CallsUnknown counts the matching instances whose calls are not in
	// CallsPerSecond: served by another collector, whose summary of the
	// dependency cannot be counted whole (the selector narrows it, or one
	// of its members there cannot be held). 0: CallsPerSecond is every
	// matching breaker's; else it is a lower bound.
	CallsUnknown int `json:"calls_unknown,omitempty"`
	// Superseded lists the live holds this one would take precedence
	// over on at least one matching breaker.
	Superseded []string `json:"superseded,omitempty"`
	// Unsupported lists the matching breakers that cannot be held, as
	// "service/instance: reason" (HoldsUnsupported), sorted: the hold is
	// not sent to them. They are not in Instances.
	Unsupported []string `json:"unsupported,omitempty"`
	// Stops is the stop conditions the hold would have (the server's
	// defaults less those dropped, then its own).
	Stops []StopCondition `json:"stops"`
	// Refused says why pre-flight would refuse the hold as a drill, one
	// reason each (a stop condition breached on the target now, an open
	// incident on it, another drill covering it); empty: it would start.
	Refused []string `json:"refused,omitempty"`
}

// HoldsUnsupported reports whether a breaker of configuration c cannot be
// held (its hello set holds_unsupported), and why, in the words the
// dashboard and the collector use: "a sony/gobreaker v2 breaker cannot be
// held open or closed"; for a breaker a source samples (Sampled), that
// cbdash only reads it.
func HoldsUnsupported(c protocol.BreakerConfig) (reason string, unsupported bool) {
	if !c.HoldsUnsupported {
		return "", false
	}
	if c.Sampled && c.Library != "" {
		// A pull source (a Hystrix stream, a Prometheus scrape): nothing
		// goes back to the service.
		return "cbdash only reads this breaker (" + c.Library + "), so it cannot be held open or closed", true
	}
	what := "this breaker"
	if c.Library != "" {
		article := "a "
		if strings.ContainsRune("aeiouAEIOU", rune(c.Library[0])) {
			article = "an " // "an opossum 10.0.0 breaker"
		}
		what = article + c.Library + " breaker"
	}
	return what + " cannot be held open or closed", true
}

// SortCoverage orders coverage by service, instance, breaker, then start.
func SortCoverage(cs []HoldCoverage) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Instance != b.Instance {
			return a.Instance < b.Instance
		}
		if a.Breaker != b.Breaker {
			return a.Breaker < b.Breaker
		}
		return a.StartedAt < b.StartedAt
	})
}

// HoldCounts is what one breaker of one instance counted while a hold
// covered it: the sum of its window reports from the moment the hold was
// sent to it until the hold ended.
type HoldCounts struct {
	Service      string          `json:"service"`
	Instance     string          `json:"instance"`
	Breaker      string          `json:"breaker"`
	Counts       protocol.Counts `json:"counts"`
	Latency      []int64         `json:"latency,omitempty"` // histogram, protocol.LatencyBoundsMillis
	LatencySumMs float64         `json:"latency_sum_ms"`
	Windows      int64           `json:"windows"` // window reports summed
}

// AddWindow adds one window report to c.
func (c *HoldCounts) AddWindow(w protocol.Window) {
	c.Counts.Add(w.Counts)
	if len(w.Latency) > 0 {
		if len(c.Latency) < len(w.Latency) {
			c.Latency = append(c.Latency, make([]int64, len(w.Latency)-len(c.Latency))...)
		}
		for i, n := range w.Latency {
			c.Latency[i] += n
		}
	}
	c.LatencySumMs += w.LatencySumMs
	c.Windows++
}

// Merge adds o's figures (counts, latency histogram and sum, windows) to
// c: what two collectors counted of one instance breaker.
func (c *HoldCounts) Merge(o HoldCounts) {
	c.Counts.Add(o.Counts)
	if len(c.Latency) < len(o.Latency) {
		c.Latency = append(c.Latency, make([]int64, len(o.Latency)-len(c.Latency))...)
	}
	for i, n := range o.Latency {
		c.Latency[i] = protocol.SatAdd(c.Latency[i], n)
	}
	c.LatencySumMs += o.LatencySumMs
	c.Windows = protocol.SatAdd(c.Windows, o.Windows)
}

// MergeHoldCounts returns rows with those of one instance breaker
// (service, instance, breaker) merged into one (HoldCounts.Merge), sorted
// by service, instance and breaker; rows is not changed. Each
// collector's rows of a hold are counted from the window reports it
// stored, so their sum is what the breaker counted.
func MergeHoldCounts(rows []HoldCounts) []HoldCounts {
	type key struct{ s, i, b string }
	at := make(map[key]int, len(rows))
	out := make([]HoldCounts, 0, len(rows))
	for _, r := range rows {
		k := key{r.Service, r.Instance, r.Breaker}
		if i, ok := at[k]; ok {
			out[i].Merge(r)
			continue
		}
		at[k] = len(out)
		r.Latency = append([]int64(nil), r.Latency...)
		out = append(out, r)
	}
	SortHoldCounts(out)
	return out
}

// SortHoldCounts orders cs by service, instance and breaker, the order
// drill reports list them in.
func SortHoldCounts(cs []HoldCounts) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Instance != b.Instance {
			return a.Instance < b.Instance
		}
		return a.Breaker < b.Breaker
	})
}

// HoldReport is the drill report of a hold: what it covered and what the
// covered breakers and their callers saw while it held.
type HoldReport struct {
	Hold HoldRecord `json:"hold"`
	// Start and End bound the hold; Ongoing is true while it is live
	// (End is then its planned expiry).
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Ongoing bool      `json:"ongoing"`
	// CountedFrom and CountedTo bound the store's whole seconds the
	// callers' figures (Dependencies) count (API 1.2.0): from the second
	// the hold started in to the end of the one it ended in. Instances
	// count each window report that overlaps the hold instead (about a
	// second each, not aligned to those seconds).
	CountedFrom time.Time `json:"counted_from"`
	CountedTo   time.Time `json:"counted_to"`
	// Result is one of the Drill* results: how the drill ended.
	Result string `json:"result"`
	// Instances has one row per covered instance breaker, sorted.
	Instances []HoldInstanceReport `json:"instances"`
	// Total sums Instances.
	Total HoldPeriod `json:"total"`
	// Dependencies compares each covered dependency (summed over all its
	// instances, covered or not) before the hold (a span as long as the
	// hold, at most an hour, ending at Start) and during it.
	Dependencies []HoldDependencyReport `json:"dependencies"`
	// Steps has one row per step of a stepped drill; absent otherwise.
	Steps []HoldStepReport `json:"steps,omitempty"`
}

// HoldStepReport is one step of a stepped drill in its report.
type HoldStepReport struct {
	Step  int     `json:"step"`  // from 1
	Share float64 `json:"share"` // percent of the instances
	// Start is when the step was due (the hold's start plus the steps
	// before); Reached is false for a step the drill never began (it
	// ended before, or a stop condition ended it at an earlier step).
	Start   time.Time `json:"start"`
	Reached bool      `json:"reached"`
	// Instances counts the instance breakers first covered during the
	// step; During sums what they counted while held.
	Instances int        `json:"instances"`
	During    HoldPeriod `json:"during"`
}

// Drill results (HoldReport.Result).
const (
	DrillOngoing  = "ongoing"
	DrillStopped  = "stopped"  // a stop condition released it (HoldRecord.Breach)
	DrillReleased = "released" // an operator released it before its end
	DrillPassed   = "passed"   // it held to its end with no stop condition breached
)

// DrillResult is hold h's result at now (one of the Drill* results).
func DrillResult(h HoldRecord, now time.Time) string {
	switch {
	case h.Breach != nil:
		return DrillStopped
	case h.LiveAt(now):
		return DrillOngoing
	case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
		return DrillReleased
	}
	return DrillPassed
}

// HoldInstanceReport is one covered instance breaker in a drill report.
type HoldInstanceReport struct {
	Service    string     `json:"service"`
	Instance   string     `json:"instance"`
	Breaker    string     `json:"breaker"`
	CoveredAt  time.Time  `json:"covered_at"`
	JoinedLate bool       `json:"joined_late"`
	Status     string     `json:"status"` // the breaker's answer (Target*)
	State      string     `json:"state,omitempty"`
	Error      string     `json:"error,omitempty"`
	During     HoldPeriod `json:"during"`
}

// HoldDependencyReport compares one dependency before and during a hold.
type HoldDependencyReport struct {
	DependencyKey
	Before HoldPeriod `json:"before"`
	During HoldPeriod `json:"during"`
}

// HoldPeriod is what breakers counted over a period, with the rates their
// callers saw.
type HoldPeriod struct {
	Counts protocol.Counts `json:"counts"`
	// Calls is every call made: admitted plus rejected.
	Calls int64 `json:"calls"`
	// ErrorRate is the percent of calls that ended in an error for the
	// caller: failures and rejections, less those a fallback answered
	// (Failures + Rejected - FallbackSuccess over Calls); 0 without calls.
	ErrorRate float64 `json:"error_rate"`
	// P50 and P99 are the latencies of admitted calls (0 when none), as
	// Go durations (nanoseconds in JSON); P50Millis and P99Millis are the
	// same in milliseconds.
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
	P50Millis float64       `json:"p50_ms"`
	P99Millis float64       `json:"p99_ms"`
}

// NewHoldPeriod computes the rates of counts and a latency histogram
// (protocol.LatencyBoundsMillis).
func NewHoldPeriod(c protocol.Counts, latency []int64) HoldPeriod {
	p := HoldPeriod{Counts: c, Calls: c.Admitted + c.Rejected()}
	if p.Calls > 0 {
		p.ErrorRate = 100 * float64(max(0, c.Failures+c.Rejected()-c.FallbackSuccess)) / float64(p.Calls)
	}
	if ms, ok := protocol.QuantileMillis(latency, 0.5); ok {
		p.P50, p.P50Millis = time.Duration(ms*float64(time.Millisecond)), ms
	}
	if ms, ok := protocol.QuantileMillis(latency, 0.99); ok {
		p.P99, p.P99Millis = time.Duration(ms*float64(time.Millisecond)), ms
	}
	return p
}
