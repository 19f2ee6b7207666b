package alert

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Defaults of AlertRule fields left at zero.
const (
	DefaultFor    = 30 * time.Second
	DefaultMargin = 10.0 // percentage points
	DefaultHold   = 2 * time.Minute
)

// Notification is one message the Engine decided to send: an alert that
// starts firing or resolves.
type Notification struct {
	Rule    cbdash.AlertRule
	Subject string // "service/breaker", or "service@instance" for stale
	Event   string // cbdash.AlertFiring or cbdash.AlertResolved
	At      time.Time
	// Since is when the alert started firing.
	Since time.Time
	// Detail says what was seen, in one line ("open on 2 of 6 instances").
	Detail string
	// Now, on a resolve, says what the subject is now, in one line
	// ("checkout/payments is closed again on 3 of 3 instances, after 3m
	// out of closed"); on a flapping notification, the flapping summary.
	Now string
	// Members, on a grouped rule's message (Subject "*/payments"), are
	// the subjects it stands for, sorted.
	Members []string
	// Incident, on an open rule's message about one dependency, is the
	// incident of that open once one exists (0 = none yet, or none):
	// payloads then link to its page beside the dependency's
	// (IncidentLink). The Service fills it at delivery.
	Incident int64
	// lastTrue, on a resolve, is when the alert's condition was last seen
	// true (a trip's time or an evaluation's): the end of the episode the
	// store keeps (Store.ResolveFiringAlert), so that a trip the leader
	// had not seen by then (reported late, or by an agent whose clock is
	// behind) starts a new episode instead of falling within this one.
	lastTrue time.Time
}

type alertKey struct {
	rule    int64
	subject string
}

type alertState struct {
	firing   bool
	since    time.Time
	lastTrue time.Time
	detail   string
	// opened: the breaker went out of closed during a headroom alert
	// (the alert follows it until it closes again).
	opened   bool
	openedAt time.Time // when it was first seen out of closed
	// flapSince is the first open of the flapping told (zero: not
	// flapping); cycles counts the opens since.
	flapSince time.Time
	cycles    int
}

// Engine evaluates alert rules against live dependency states and
// de-duplicates: an alert fires once when its condition becomes true and
// resolves once when the condition has stayed false for the rule's Hold,
// however often the breaker flaps in between. It does no I/O and reads no
// clock; it is not safe for concurrent use (Service serialises calls).
type Engine struct {
	rules  []cbdash.AlertRule
	deps   map[cbdash.DependencyKey]cbdash.Dependency
	opened map[cbdash.DependencyKey]time.Time // transitions to open since the last evaluation
	alerts map[alertKey]*alertState
	// recent holds the opens of each open rule's subject within its
	// flap window, oldest first, beyond the alert's episodes.
	recent map[alertKey][]time.Time
	// ended holds, per subject with recent opens, when its alerts that
	// were not flapping resolved within the flap window, oldest first: a
	// flapping message counting opens of an earlier alert says so.
	ended map[alertKey][]time.Time
	// stopped is the last drill a stop condition ended, by dependency it
	// covered (cbdash.EventDrillStopped).
	stopped map[cbdash.DependencyKey]stoppedDrill
	// fallbacks is when each dependency was first known and its
	// fallbacks last served (live state and store, LoadFallbacks).
	fallbacks       map[cbdash.DependencyKey]fallbackSeen
	fallbacksLoaded bool
	// elsewhere is the lines of the instances other collectors serve, by
	// dependency (LoadElsewhere).
	elsewhere map[cbdash.DependencyKey][]*cbdash.InstanceBreaker
}

// stoppedDrill is a drill a stop condition ended: when, and its reason.
type stoppedDrill struct {
	at     time.Time
	detail string
}

// NewEngine returns an Engine with no rules.
func NewEngine() *Engine {
	return &Engine{
		deps:      make(map[cbdash.DependencyKey]cbdash.Dependency),
		opened:    make(map[cbdash.DependencyKey]time.Time),
		alerts:    make(map[alertKey]*alertState),
		recent:    make(map[alertKey][]time.Time),
		ended:     make(map[alertKey][]time.Time),
		stopped:   make(map[cbdash.DependencyKey]stoppedDrill),
		fallbacks: make(map[cbdash.DependencyKey]fallbackSeen),
		elsewhere: make(map[cbdash.DependencyKey][]*cbdash.InstanceBreaker),
	}
}

// SetRules replaces the rules. Alerts of rules that are gone or disabled
// are forgotten without a resolve message; alerts of rules kept (same ID)
// keep their state.
func (e *Engine) SetRules(rules []cbdash.AlertRule) {
	e.rules = e.rules[:0]
	keep := make(map[int64]bool)
	for _, r := range rules {
		if !r.Disabled {
			e.rules = append(e.rules, r)
			keep[r.ID] = true
		}
	}
	for k := range e.alerts {
		if !keep[k.rule] {
			delete(e.alerts, k)
		}
	}
	for k := range e.recent {
		if !keep[k.rule] {
			delete(e.recent, k)
			delete(e.ended, k)
		}
	}
}

// Observe feeds one live event: dependency events update the state the
// rules read; a transition to open is remembered until the next Evaluate,
// so that an open shorter than the evaluation interval still fires.
func (e *Engine) Observe(ev cbdash.Event) {
	switch {
	case ev.Kind == cbdash.EventDependency && ev.Dependency != nil:
		e.deps[ev.Dependency.DependencyKey] = *ev.Dependency
		e.observeFallback(*ev.Dependency)
	case ev.Kind == cbdash.EventTransition && ev.Transition != nil && ev.Transition.To == protocol.StateOpen:
		k := cbdash.DependencyKey{Service: ev.Transition.Service, Breaker: ev.Transition.Breaker}
		if _, ok := e.opened[k]; !ok {
			e.opened[k] = ev.At
		}
	case ev.Kind == cbdash.EventDrillStopped && ev.Hold != nil:
		e.drillStopped(*ev.Hold, ev.At)
	}
}

// drillStopped remembers, for each dependency hold h covered, that a stop
// condition ended it at at.
func (e *Engine) drillStopped(h cbdash.HoldRecord, at time.Time) {
	detail := fmt.Sprintf("drill %s (%s) stopped: %s", h.ID, h.Selector.String(), h.ReleaseReason)
	keys := map[cbdash.DependencyKey]bool{}
	if h.Selector.Service != cbdash.AnyService {
		keys[cbdash.DependencyKey{Service: h.Selector.Service, Breaker: h.Selector.Breaker}] = true
	}
	for _, c := range h.Coverage {
		keys[cbdash.DependencyKey{Service: c.Service, Breaker: c.Breaker}] = true
	}
	for k, s := range e.stopped { // bounded: a stop older than an hour fires nothing more
		if at.Sub(s.at) > time.Hour {
			delete(e.stopped, k)
		}
	}
	for k := range keys {
		e.stopped[k] = stoppedDrill{at: at, detail: detail}
	}
}

// drillStoppedCondition holds for the minute after a drill covering k was
// stopped: long enough for an evaluation to see it.
func (e *Engine) drillStoppedCondition(k cbdash.DependencyKey, now time.Time) (string, bool) {
	s, ok := e.stopped[k]
	if !ok || now.Sub(s.at) >= time.Minute {
		return "", false
	}
	return s.detail, true
}

// Trip feeds one transition to open (live, or replayed from the store
// after a handover or a restart) and returns the alerts it starts: one
// per enabled "open" rule watching its dependency that is not firing
// yet, firing since the trip's time (the agent's At), so that the same
// trip gives the same episode start on every leader. An alert firing
// already counts the trip as its condition last seen true (its hold
// restarts from the trip's time). Other transitions return nil. The
// resolve follows from Evaluate, once the rule's hold has passed with the
// breaker closed.
func (e *Engine) Trip(tr cbdash.TransitionRecord) []Notification {
	if tr.To != protocol.StateOpen {
		return nil
	}
	k := cbdash.DependencyKey{Service: tr.Service, Breaker: tr.Breaker}
	at := time.UnixMilli(tr.At).UTC()
	var out []Notification
	for _, r := range e.rules {
		if r.Kind != cbdash.AlertOpen || !matches(r, k) {
			continue
		}
		out = append(out, e.trip(r, k, at)...)
	}
	return out
}

// trip is Trip for one open rule r watching k.
func (e *Engine) trip(r cbdash.AlertRule, k cbdash.DependencyKey, at time.Time) []Notification {
	ak := alertKey{r.ID, k.String()}
	var out []Notification
	st := e.alerts[ak]
	if st != nil && at.After(st.lastTrue) {
		st.lastTrue = at
	}
	if st == nil || !st.firing {
		detail := k.String() + " opened"
		if d, ok := e.deps[k]; ok {
			detail, _ = openCondition(d, at)
		}
		st = &alertState{firing: true, since: at, lastTrue: at, detail: detail}
		e.alerts[ak] = st
		out = append(out, Notification{Rule: r, Subject: ak.subject, Event: cbdash.AlertFiring, At: at, Since: at, Detail: detail})
	}
	if n, ok := e.flap(r, ak, st, at); ok {
		out = append(out, n)
	}
	return out
}

// Adopt makes the firing alert of rule and subject fire since since: the
// store holds it firing with that start (another leader fired it first).
func (e *Engine) Adopt(rule int64, subject string, since time.Time) {
	if st := e.alerts[alertKey{rule, subject}]; st != nil && st.firing {
		st.since = since
	}
}

// Forget drops the alert of rule and subject without a resolve: the
// store says the trip that fired it is within an episode already alerted
// and resolved (a replay).
func (e *Engine) Forget(rule int64, subject string) {
	delete(e.alerts, alertKey{rule, subject})
}

// Load replaces the known dependency states (a collector snapshot).
func (e *Engine) Load(deps []cbdash.Dependency) {
	clear(e.deps)
	for _, d := range deps {
		e.deps[d.DependencyKey] = d
		e.observeFallback(d)
	}
}

// Evaluate checks every rule at now and returns the notifications to send,
// firing ones before resolved ones, each group sorted by rule and subject.
func (e *Engine) Evaluate(now time.Time) []Notification {
	seen := make(map[alertKey]bool)
	var out []Notification
	for _, r := range e.rules {
		for subject, detail := range e.conditions(r, now) {
			k := alertKey{r.ID, subject}
			seen[k] = true
			st := e.alerts[k]
			if st == nil {
				st = &alertState{}
				e.alerts[k] = st
			}
			st.lastTrue = now
			st.detail = detail
			if !st.firing {
				st.firing = true
				st.since = e.firingSince(r, subject, now)
				out = append(out, Notification{Rule: r, Subject: subject, Event: cbdash.AlertFiring, At: now, Since: st.since, Detail: detail})
			}
		}
	}
	rules := make(map[int64]cbdash.AlertRule, len(e.rules))
	for _, r := range e.rules {
		rules[r.ID] = r
	}
	for k, st := range e.alerts {
		if seen[k] {
			continue
		}
		r := rules[k.rule]
		wait := hold(r)
		if !st.flapSince.IsZero() {
			wait = settleAfter(r)
		}
		if now.Sub(st.lastTrue) < wait {
			continue
		}
		delete(e.alerts, k)
		if !st.flapSince.IsZero() {
			delete(e.recent, k) // settled: the next open starts counting afresh
			delete(e.ended, k)
		} else if len(e.recent[k]) > 0 {
			e.ended[k] = append(e.ended[k], now)
		}
		if st.firing {
			out = append(out, Notification{Rule: r, Subject: k.subject, Event: cbdash.AlertResolved, At: now, Since: st.since,
				Detail: "resolved: " + st.detail, Now: e.resolvedNow(r, k.subject, st), lastTrue: st.lastTrue})
		}
	}
	e.pruneRecent(rules, now)
	clear(e.opened)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Event != b.Event {
			return a.Event == cbdash.AlertFiring
		}
		if a.Rule.ID != b.Rule.ID {
			return a.Rule.ID < b.Rule.ID
		}
		return a.Subject < b.Subject
	})
	return out
}

// firingSince is the start of an alert that starts firing at now: for an
// "open" rule, when the dependency's episode out of closed began
// (Dependency.OpenSince, the trip's time, as Trip gives it: every leader
// finds the same start), else now.
func (e *Engine) firingSince(r cbdash.AlertRule, subject string, now time.Time) time.Time {
	if r.Kind != cbdash.AlertOpen {
		return now
	}
	for k, d := range e.deps {
		if k.String() == subject && !d.OpenSince.IsZero() && d.OpenSince.Before(now) {
			return d.OpenSince.UTC()
		}
	}
	return now
}

// Restore takes back the alerts that were firing before a restart (from
// the store), so that a condition still true does not fire again. Each
// counts as last seen true at now: one whose condition is false by now
// resolves once the rule's hold has passed. Alerts of unknown or disabled
// rules, and alerts no longer firing, are ignored.
func (e *Engine) Restore(alerts []cbdash.FiringAlert, now time.Time) {
	active := make(map[int64]bool, len(e.rules))
	for _, r := range e.rules {
		active[r.ID] = true
	}
	for _, a := range alerts {
		if !a.Firing || !active[a.RuleID] {
			continue
		}
		e.alerts[alertKey{a.RuleID, a.Subject}] = &alertState{firing: true, since: a.Since, lastTrue: now, detail: a.Detail,
			flapSince: a.FlappingSince}
	}
}

// Rule returns the enabled rule of that ID.
func (e *Engine) Rule(id int64) (cbdash.AlertRule, bool) {
	for _, r := range e.rules {
		if r.ID == id {
			return r, true
		}
	}
	return cbdash.AlertRule{}, false
}

// Alerts returns the alerts firing now, longest firing first (then by
// rule and subject).
func (e *Engine) Alerts() []cbdash.FiringAlert {
	var out []cbdash.FiringAlert
	for k, st := range e.alerts {
		if st.firing {
			out = append(out, cbdash.FiringAlert{RuleID: k.rule, Subject: k.subject, Firing: true, Since: st.since, Detail: st.detail})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		if a.RuleID != b.RuleID {
			return a.RuleID < b.RuleID
		}
		return a.Subject < b.Subject
	})
	return out
}

// Firing returns the subjects firing now per rule ID, sorted.
func (e *Engine) Firing() map[int64][]string {
	out := make(map[int64][]string)
	for k, st := range e.alerts {
		if st.firing {
			out[k.rule] = append(out[k.rule], k.subject)
		}
	}
	for _, s := range out {
		slices.Sort(s)
	}
	return out
}

func hold(r cbdash.AlertRule) time.Duration {
	if r.Hold > 0 {
		return r.Hold
	}
	return DefaultHold
}

// matches reports whether the rule watches dependency k.
func matches(r cbdash.AlertRule, k cbdash.DependencyKey) bool {
	return (r.Service == "*" || r.Service == k.Service) && (r.Breaker == "" || r.Breaker == k.Breaker)
}

// conditions returns the subjects for which the rule's condition holds at
// now, each with a one-line detail.
func (e *Engine) conditions(r cbdash.AlertRule, now time.Time) map[string]string {
	if r.Kind == cbdash.AlertStale || r.Kind == cbdash.AlertHalfOpenLong {
		return e.instanceConditions(r, now)
	}
	out := make(map[string]string)
	for k, d := range e.deps {
		if !matches(r, k) {
			continue
		}
		switch r.Kind {
		case cbdash.AlertOpen:
			if detail, ok := openCondition(d, e.opened[k]); ok {
				out[k.String()] = detail
			}
		case cbdash.AlertHeadroom:
			if detail, ok := e.headroomFollows(r, d, now); ok {
				out[k.String()] = detail
			}
		case cbdash.AlertFallbackUnexercised:
			if detail, ok := e.fallbackCondition(r, d, now); ok {
				out[k.String()] = detail
			}
		}
	}
	if r.Kind == cbdash.AlertDrillStopped {
		for k := range e.stopped {
			if detail, ok := e.drillStoppedCondition(k, now); ok && matches(r, k) {
				out[k.String()] = detail
			}
		}
	}
	// A transition to open of a dependency we have no state for yet.
	if r.Kind == cbdash.AlertOpen {
		for k := range e.opened {
			if _, known := e.deps[k]; !known && matches(r, k) {
				out[k.String()] = k.String() + " opened"
			}
		}
	}
	return out
}

func openCondition(d cbdash.Dependency, openedAt time.Time) (string, bool) {
	n := d.ByState[protocol.StateOpen] + d.ByState[protocol.StateHalfOpen]
	if n == 0 && openedAt.IsZero() {
		return "", false
	}
	if n == 0 {
		n = 1
	}
	return fmt.Sprintf("%s is open on %d of %d instances", d.DependencyKey, n, max(d.Instances, n)), true
}

// instanceConditions is conditions for a rule about single instances
// (stale, half-open too long): over the lines of the instances served
// here and of those other collectors serve (LoadElsewhere).
func (e *Engine) instanceConditions(r cbdash.AlertRule, now time.Time) map[string]string {
	out := make(map[string]string)
	for k, d := range e.keysWithLines(r) {
		lines := e.linesOf(k, d)
		if r.Kind == cbdash.AlertHalfOpenLong {
			if detail, ok := halfOpenCondition(k, lines, r, now); ok {
				out[k.String()] = detail
			}
			continue
		}
		for _, ib := range lines {
			if ib.Stale {
				out[k.Service+"@"+ib.Instance] = fmt.Sprintf("instance %s of %s stopped reporting (last seen %s)", ib.Instance, k.Service, ib.LastSeen.UTC().Format(time.RFC3339))
			}
		}
	}
	return out
}

// halfOpenCondition holds when one of dependency k's live lines has been
// half-open for the rule's For (DefaultFor) since its last transition.
func halfOpenCondition(k cbdash.DependencyKey, lines []*cbdash.InstanceBreaker, r cbdash.AlertRule, now time.Time) (string, bool) {
	limit := r.For
	if limit <= 0 {
		limit = DefaultFor
	}
	var long []string
	var longest time.Duration
	for _, ib := range lines {
		if ib.Stale || ib.State != protocol.StateHalfOpen || ib.LastTransition.IsZero() {
			continue
		}
		if age := now.Sub(ib.LastTransition); age >= limit {
			long = append(long, ib.Instance)
			longest = max(longest, age)
		}
	}
	if len(long) == 0 {
		return "", false
	}
	slices.Sort(long)
	return fmt.Sprintf("%s has been half-open for %s on %s", k, longest.Truncate(time.Second), strings.Join(long, ", ")), true
}

func headroomCondition(d cbdash.Dependency, r cbdash.AlertRule) (string, bool) {
	margin := r.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	h := d.Headroom
	if !cbdash.ClosenessOf(h).Judged { // below the minimum calls the breaker cannot open
		return "", false
	}
	if h.FailureRateThreshold > 0 && h.FailureRate >= h.FailureRateThreshold-margin {
		return fmt.Sprintf("%s failure rate %.1f%% is within %.0f points of its threshold %.0f%% (%d calls in the window)",
			d.DependencyKey, h.FailureRate, margin, h.FailureRateThreshold, h.Calls), true
	}
	if h.SlowCallRateThreshold > 0 && h.SlowCallRate >= h.SlowCallRateThreshold-margin {
		return fmt.Sprintf("%s slow-call rate %.1f%% is within %.0f points of its threshold %.0f%% (%d calls in the window)",
			d.DependencyKey, h.SlowCallRate, margin, h.SlowCallRateThreshold, h.Calls), true
	}
	return "", false
}
