package alert

import (
	"fmt"
	"slices"
	"time"

	"github.com/cbdash/cbdash"
)

// Defaults of the flap detection of open rules (cbdash.AlertRule
// FlapCount and FlapWindow left at zero): more than 5 opens within 10
// minutes is flapping. Nagios' flap detection and Alertmanager's users
// (prometheus/alertmanager#204) ask for the same relief: one message for
// a breaker that keeps opening, not one per open.
const (
	DefaultFlapCount  = 5
	DefaultFlapWindow = 10 * time.Minute
)

func flapCount(r cbdash.AlertRule) int {
	if r.FlapCount > 0 {
		return r.FlapCount
	}
	return DefaultFlapCount
}

func flapWindow(r cbdash.AlertRule) time.Duration {
	if r.FlapWindow > 0 {
		return r.FlapWindow
	}
	return DefaultFlapWindow
}

// settleAfter is how long a flapping alert's breaker must stay closed
// before it settles: the mean gap between opens at the flapping limit
// (FlapWindow / FlapCount, 2m by default), at least the rule's Hold.
func settleAfter(r cbdash.AlertRule) time.Duration {
	return max(hold(r), flapWindow(r)/time.Duration(flapCount(r)))
}

// flap counts the open at at (a trip of r's subject, whose alert st
// fires) and, when the opens within the flap window exceed the flap
// count and the alert is not flapping yet, returns the one AlertFlapping
// notification of this episode. An open counted already (a replay) is
// not counted again.
func (e *Engine) flap(r cbdash.AlertRule, ak alertKey, st *alertState, at time.Time) (Notification, bool) {
	opens := e.recent[ak]
	if slices.ContainsFunc(opens, at.Equal) {
		return Notification{}, false
	}
	opens = append(opens, at)
	slices.SortFunc(opens, time.Time.Compare)
	from := at.Add(-flapWindow(r))
	opens = slices.DeleteFunc(opens, func(t time.Time) bool { return t.Before(from) })
	if keep := flapCount(r) + 1; len(opens) > keep { // enough to tell flapping: bounded memory
		opens = slices.Delete(opens, 0, len(opens)-keep)
	}
	e.recent[ak] = opens
	if !st.flapSince.IsZero() {
		st.cycles++
		return Notification{}, false
	}
	if len(opens) <= flapCount(r) {
		return Notification{}, false
	}
	st.flapSince, st.cycles = opens[0], len(opens)
	summary := fmt.Sprintf("%s is flapping: opened %d times in %s since %s%s; one message when it settles",
		ak.subject, len(opens), at.Sub(opens[0]).Truncate(time.Second), opens[0].UTC().Format(time.RFC3339), e.earlier(ak, st, opens))
	return Notification{Rule: r, Subject: ak.subject, Event: cbdash.AlertFlapping, At: at, Since: st.since,
		Detail: st.detail, Now: summary}, true
}

// earlier says how many of opens came before st's alert fired, in alerts
// of ak that resolved (the flap window spans alerts: a breaker whose
// alert resolves between opens flaps all the same), or "" when none did.
func (e *Engine) earlier(ak alertKey, st *alertState, opens []time.Time) string {
	n := 0
	for _, t := range opens {
		if t.Before(st.since) {
			n++
		}
	}
	var ended []time.Time
	for _, t := range e.ended[ak] {
		if !t.Before(opens[0]) && !t.After(st.since) {
			ended = append(ended, t)
		}
	}
	switch {
	case n == 0:
		return ""
	case len(ended) == 0:
		return fmt.Sprintf(" (%d of them before this alert fired)", n)
	case len(ended) == 1:
		return fmt.Sprintf(" (%d of them before this alert, in one that resolved at %s)", n, ended[0].UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(" (%d of them before this alert, in %d that resolved, the last at %s)", n, len(ended), ended[len(ended)-1].UTC().Format(time.RFC3339))
}

// pruneRecent forgets the opens older than their rule's flap window at
// now, and the subjects left with none.
func (e *Engine) pruneRecent(rules map[int64]cbdash.AlertRule, now time.Time) {
	for k, opens := range e.recent {
		from := now.Add(-flapWindow(rules[k.rule]))
		opens = slices.DeleteFunc(opens, func(t time.Time) bool { return t.Before(from) })
		if len(opens) == 0 {
			delete(e.recent, k)
			delete(e.ended, k)
			continue
		}
		e.recent[k] = opens
		if ended := slices.DeleteFunc(e.ended[k], func(t time.Time) bool { return t.Before(opens[0]) }); len(ended) > 0 {
			e.ended[k] = ended
		} else {
			delete(e.ended, k)
		}
	}
}

// SetFlapping marks the firing alert of rule and subject as flapping
// since since (the store says its flapping message was sent already).
func (e *Engine) SetFlapping(rule int64, subject string, since time.Time) {
	if st := e.alerts[alertKey{rule, subject}]; st != nil && st.firing && st.flapSince.IsZero() {
		st.flapSince = since
	}
}
