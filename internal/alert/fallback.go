package alert

import (
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// DefaultFallbackFor is the For of a fallback_unexercised rule left at
// zero: 30 days.
const DefaultFallbackFor = 30 * 24 * time.Hour

// fallbackSeen is what the engine knows of a dependency's fallbacks: when
// the breaker was first known and when its fallbacks last served
// rejected calls (zero: never, as far as the store and the live state
// know).
type fallbackSeen struct {
	known, served time.Time
}

// LoadFallbacks merges what the store keeps of the fallbacks
// (Store.FallbackFreshness) into what the live state told: the earlier
// known time and the later served time win, so a load never moves a
// fallback's last run back.
func (e *Engine) LoadFallbacks(fs []cbdash.FallbackFreshness) {
	for _, f := range fs {
		cur := e.fallbacks[f.DependencyKey]
		if !f.KnownSince.IsZero() && (cur.known.IsZero() || f.KnownSince.Before(cur.known)) {
			cur.known = f.KnownSince.UTC()
		}
		if f.LastServed.After(cur.served) {
			cur.served = f.LastServed.UTC()
		}
		e.fallbacks[f.DependencyKey] = cur
	}
	e.fallbacksLoaded = true
}

// WatchesFallbacks reports whether an enabled rule is of kind
// fallback_unexercised (only then does the Service read the store's
// fallback history).
func (e *Engine) WatchesFallbacks() bool {
	for _, r := range e.rules {
		if r.Kind == cbdash.AlertFallbackUnexercised {
			return true
		}
	}
	return false
}

// observeFallback takes the live state's last fallback run of d.
func (e *Engine) observeFallback(d cbdash.Dependency) {
	if d.Fallback == nil {
		return
	}
	cur := e.fallbacks[d.DependencyKey]
	if d.Fallback.LastServed.After(cur.served) {
		cur.served = d.Fallback.LastServed.UTC()
		e.fallbacks[d.DependencyKey] = cur
	}
}

// fallbackCondition holds when the fallbacks of d have not served
// rejected calls for the rule's For, or never while the breaker has been
// known that long. A breaker first seen live (not yet in the store's
// history) counts as known from now. Nothing holds before the store's
// history is loaded (LoadFallbacks): the live state alone forgets the
// runs before a restart.
func (e *Engine) fallbackCondition(r cbdash.AlertRule, d cbdash.Dependency, now time.Time) (string, bool) {
	if !e.fallbacksLoaded {
		return "", false
	}
	limit := r.For
	if limit <= 0 {
		limit = DefaultFallbackFor
	}
	f := e.fallbacks[d.DependencyKey]
	if f.known.IsZero() {
		f.known = now
		e.fallbacks[d.DependencyKey] = f
	}
	k := d.DependencyKey
	todo := fmt.Sprintf("; schedule a drill: cbdash drill schedule %s --every 'tue 10:00' --for 10m --reason 'exercise the fallback'", k)
	switch {
	case !f.served.IsZero() && now.Sub(f.served) >= limit:
		return fmt.Sprintf("%s fallback has not served rejected calls for %s (last at %s; limit %s)%s",
			k, days(now.Sub(f.served)), f.served.Format("2006-01-02 15:04 UTC"), days(limit), todo), true
	case f.served.IsZero() && now.Sub(f.known) >= limit:
		return fmt.Sprintf("%s fallback has never served rejected calls in the %s the breaker has been known (since %s; limit %s)%s",
			k, days(now.Sub(f.known)), f.known.Format("2006-01-02 15:04 UTC"), days(limit), todo), true
	}
	return "", false
}

// days is a long span in whole days ("31 days"), a shorter one to the
// minute ("5h30m").
func days(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= 2*day:
		return fmt.Sprintf("%d days", int(d/day))
	case d >= day:
		return "1 day"
	}
	return d.Truncate(time.Minute).String()
}

// fallbackNow is the resolve's "now" of a fallback_unexercised alert:
// when the fallback last served, and how well.
func (e *Engine) fallbackNow(d cbdash.Dependency, states string) string {
	f := e.fallbacks[d.DependencyKey]
	out := fmt.Sprintf("%s fallback exercised again: it last served rejected calls at %s", d.DependencyKey, f.served.Format("2006-01-02 15:04:05 UTC"))
	if fb := d.Fallback; fb != nil && fb.Served+fb.Failed > 0 {
		out += fmt.Sprintf(" (%.0f %% served: %d of %d)", fb.SuccessShare, fb.Served, fb.Served+fb.Failed)
	}
	return out + "; " + states
}
