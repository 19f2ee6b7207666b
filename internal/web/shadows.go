package web

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// ShadowHistory is what the pages read of the would-be transitions of
// the breakers' shadow configurations (sdk/breaker Config.Shadows, never
// enforced): the same query as History.Transitions, records with Shadow
// set. *store.Store implements it.
type ShadowHistory interface {
	ShadowTransitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error)
}

// shadowTransitions reads q's shadow transitions; none when the server
// keeps none (Config.ShadowHistory nil).
func (s *Server) shadowTransitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error) {
	if s.shadows == nil {
		return nil, nil
	}
	return s.shadows.ShadowTransitions(ctx, q)
}

// shadowRow is a shadow transition's line in the transition log, marked
// as not enforced.
func shadowRow(r cbdash.TransitionRecord) templates.TransitionRow {
	return templates.TransitionRow{
		At: stamp(time.UnixMilli(r.At)), Instance: r.Instance, Shadow: r.Shadow,
		From: stateView(r.From), To: stateView(r.To), Cause: causeText(r.Transition),
	}
}

// shadowNames are the names of the shadow configurations d's instances
// reported, in the order of the first instance that reported each.
func shadowNames(d cbdash.Dependency) []string {
	var names []string
	for _, ib := range d.PerInstance {
		if ib.Config == nil {
			continue
		}
		for _, sh := range ib.Config.Shadows.List() {
			if !slices.Contains(names, sh.Name) {
				names = append(names, sh.Name)
			}
		}
	}
	return names
}

// shadowSettings returns the reported settings of d's shadow called name.
func shadowSettings(d cbdash.Dependency, name string) (protocol.BreakerConfig, bool) {
	for _, ib := range d.PerInstance {
		if ib.Config == nil {
			continue
		}
		for _, sh := range ib.Config.Shadows.List() {
			if sh.Name == name {
				return sh, true
			}
		}
	}
	return protocol.BreakerConfig{}, false
}

// shadowLanes is the dependency page's shadow section over sp: the
// recorded lane (any instance out of closed), then one lane per shadow
// (any instance's shadow out of closed), labelled with when it would
// have opened. nil when d has no shadow, reported or recorded in sp.
func (s *Server) shadowLanes(ctx context.Context, d cbdash.Dependency, sp span) (*templates.ShadowLanes, error) {
	q := cbdash.TransitionQuery{Service: d.Service, Breaker: d.Breaker, From: sp.from, To: sp.to, Limit: 10000}
	shadow, err := s.shadowTransitions(ctx, q)
	if err != nil {
		return nil, err
	}
	names := shadowNames(d)
	for _, r := range shadow {
		if !slices.Contains(names, r.Shadow) {
			names = append(names, r.Shadow)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	live, err := s.history.Transitions(ctx, q)
	if err != nil {
		return nil, err
	}
	place := rangePlacer(sp.from, sp.to)
	v := &templates.ShadowLanes{From: timeOfDay(sp.from), To: timeOfDay(sp.to), Recorded: outOfClosed(live, sp.to, place)}
	for _, name := range names {
		mine := slices.DeleteFunc(slices.Clone(shadow), func(r cbdash.TransitionRecord) bool { return r.Shadow != name })
		l := templates.ShadowLane{Name: name, Label: shadowLabel(name, mine), Segs: outOfClosed(mine, sp.to, place)}
		if c, ok := shadowSettings(d, name); ok {
			l.Settings = tune.Describe(c)
		}
		v.Lanes = append(v.Lanes, l)
	}
	return v, nil
}

// shadowLabel is "shadow: NAME (would have opened at 12:01:05, 12:20:00)"
// from the shadow's trips (closed > open) in trs, or "(would not have
// opened)".
func shadowLabel(name string, trs []cbdash.TransitionRecord) string {
	var at []string
	for _, r := range trs {
		if r.From == protocol.StateClosed && r.To == protocol.StateOpen {
			at = append(at, time.UnixMilli(r.At).UTC().Format("15:04:05"))
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	switch {
	case len(at) == 0:
		return "shadow: " + name + " (would not have opened)"
	case len(at) > 3:
		return fmt.Sprintf("shadow: %s (would have opened %d times, first at %s)", name, len(at), at[0])
	}
	return "shadow: " + name + " (would have opened at " + strings.Join(at, ", ") + ")"
}

// rangePlacer places [a, b) on a lane of 1000 units for [from, to).
func rangePlacer(from, to time.Time) func(state string, a, b time.Time) templates.LaneSeg {
	span := max(to.Sub(from).Seconds(), 1e-3)
	at := func(d time.Duration) string { return strconv.FormatFloat(1000*d.Seconds()/span, 'f', 2, 64) }
	return func(state string, a, b time.Time) templates.LaneSeg {
		a, b = maxTime(a, from), minTime(b, to)
		return templates.LaneSeg{State: state, X: at(a.Sub(from)), W: at(max(b.Sub(a), 0)),
			Title: fmt.Sprintf("%s %s to %s", strings.ReplaceAll(state, "_", "-"), a.UTC().Format("15:04:05"), b.UTC().Format("15:04:05"))}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// outOfClosed is the stretches, up to end, when any instance of trs was
// out of closed (open), placed by place.
func outOfClosed(trs []cbdash.TransitionRecord, end time.Time, place func(state string, a, b time.Time) templates.LaneSeg) []templates.LaneSeg {
	trs = slices.Clone(trs)
	slices.SortFunc(trs, func(a, b cbdash.TransitionRecord) int { return cmp.Compare(a.At, b.At) })
	out := []templates.LaneSeg{}
	notClosed := map[string]bool{}
	var since time.Time
	for _, t := range trs {
		was := len(notClosed) > 0
		if t.To == protocol.StateClosed {
			delete(notClosed, t.Instance)
		} else {
			notClosed[t.Instance] = true
		}
		at := time.UnixMilli(t.At)
		switch now := len(notClosed) > 0; {
		case now && !was:
			since = at
		case !now && was:
			out = append(out, place("open", since, at))
		}
	}
	if len(notClosed) > 0 {
		out = append(out, place("open", since, end))
	}
	return out
}

// countShadowTrips sets, on each shadow run of rep, the would-be trips
// its instances recorded in rep's range (left unset if they cannot be
// read).
func (s *Server) countShadowTrips(ctx context.Context, rep *tune.Report) {
	if s.shadows == nil {
		return
	}
	var trs []cbdash.TransitionRecord
	read := false
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.Shadow == "" {
			continue
		}
		if !read {
			var err error
			if trs, err = s.shadows.ShadowTransitions(ctx, cbdash.TransitionQuery{Service: rep.Service, Breaker: rep.Breaker, From: rep.From, To: rep.To, Limit: 10000}); err != nil {
				return
			}
			read = true
		}
		n := 0
		for _, t := range trs {
			if t.Shadow == r.Shadow && t.From == protocol.StateClosed && t.To == protocol.StateOpen {
				n++
			}
		}
		r.RecordedTrips = &n
	}
}
