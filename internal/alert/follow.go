package alert

import (
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// headroomFollows is the condition of headroom rule r on d: heading for
// open (headroomCondition), or, for an alert firing already, the breaker
// out of closed on a live instance (or opened since the last
// evaluation). A headroom alert whose breaker opens thus stays firing
// (its detail says it opened) until the breaker is closed again and the
// rates are out of the margin for the rule's hold: never a resolve for
// the thing that just got worse (issue 33).
func (e *Engine) headroomFollows(r cbdash.AlertRule, d cbdash.Dependency, now time.Time) (string, bool) {
	st := e.alerts[alertKey{r.ID, d.DependencyKey.String()}]
	if st != nil && st.firing {
		if at, opened := e.opened[d.DependencyKey]; opened || outOfClosed(d) > 0 {
			if !st.opened {
				st.opened, st.openedAt = true, now
				if opened {
					st.openedAt = at
				}
			}
			detail, _ := openCondition(d, e.opened[d.DependencyKey])
			return detail + " (it was heading for open)", true
		}
	}
	return headroomCondition(d, r)
}

// outOfClosed is how many live instances of d are open or half-open.
func outOfClosed(d cbdash.Dependency) int {
	return d.ByState[protocol.StateOpen] + d.ByState[protocol.StateHalfOpen]
}

// resolvedNow says, in one line, what the subject of a resolving alert
// of r is now: the breaker's states over its live instances (closed
// again, after how long out of closed), its rates for a headroom rule,
// the instance for a stale rule; a flapping alert also says how many
// opens since when.
func (e *Engine) resolvedNow(r cbdash.AlertRule, subject string, st *alertState) string {
	if svc, inst, ok := strings.Cut(subject, "@"); ok && r.Kind == cbdash.AlertStale {
		return e.instanceNow(svc, inst)
	}
	out := e.breakerNow(r, subject, st)
	if !st.flapSince.IsZero() {
		out = fmt.Sprintf("settled after flapping (opened %d times since %s): %s",
			st.cycles, st.flapSince.UTC().Format(time.RFC3339), out)
	}
	return out
}

// breakerNow is resolvedNow for a "service/breaker" subject.
func (e *Engine) breakerNow(r cbdash.AlertRule, subject string, st *alertState) string {
	d, ok := e.depOf(subject)
	if !ok {
		return subject + " is no longer reported"
	}
	states := fmt.Sprintf("closed on %d of %d instances", d.ByState[protocol.StateClosed], d.Instances)
	if forced := d.ByState[protocol.StateForcedOpen] + d.ByState[protocol.StateForcedClosed]; forced > 0 {
		states += fmt.Sprintf(", forced on %d", forced)
	}
	from := st.since
	if r.Kind == cbdash.AlertHeadroom && st.opened {
		from = st.openedAt // out of closed since, not heading for open since
	}
	episode := st.lastTrue.Sub(from).Truncate(time.Second)
	switch {
	case r.Kind == cbdash.AlertHeadroom && !st.opened:
		h := d.Headroom
		rates := fmt.Sprintf("failure rate %.1f%% of %.0f%%", h.FailureRate, h.FailureRateThreshold)
		if h.SlowCallRateThreshold > 0 {
			rates += fmt.Sprintf(", slow-call rate %.1f%% of %.0f%%", h.SlowCallRate, h.SlowCallRateThreshold)
		}
		return fmt.Sprintf("%s never opened and is back out of the margin (%s); %s", subject, rates, states)
	case r.Kind == cbdash.AlertHalfOpenLong:
		return fmt.Sprintf("%s is no longer half-open too long; %s", subject, states)
	case r.Kind == cbdash.AlertFallbackUnexercised:
		return e.fallbackNow(d, states)
	}
	return fmt.Sprintf("%s is closed again after %s out of closed; %s", subject, episode, states)
}

// instanceNow is resolvedNow for a "service@instance" subject.
func (e *Engine) instanceNow(svc, inst string) string {
	for k, d := range e.deps {
		if k.Service != svc {
			continue
		}
		for _, ib := range e.linesOf(k, d) {
			if ib.Instance == inst && !ib.Stale {
				return fmt.Sprintf("instance %s of %s reports again", inst, svc)
			}
		}
	}
	return fmt.Sprintf("instance %s of %s is no longer listed (removed, or its stale entry expired)", inst, svc)
}

// depOf returns the dependency whose key reads subject.
func (e *Engine) depOf(subject string) (cbdash.Dependency, bool) {
	for k, d := range e.deps {
		if k.String() == subject {
			return d, true
		}
	}
	return cbdash.Dependency{}, false
}
