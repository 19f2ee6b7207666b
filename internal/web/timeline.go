package web

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

const (
	timelineW     = 1000.0
	timelineX0    = 260.0
	maxLanes      = 200
	maxTimelineTr = 20000
)

// timeline draws one lane per dependency that was not closed somewhere
// in the range, built from the stored transitions of every instance.
func (s *Server) timeline(c echo.Context) error {
	now := s.now()
	sp, err := parseSpan(c.QueryParams(), "1h", now)
	if err != nil {
		return err
	}
	svc := c.QueryParam("service")
	recs, err := s.history.Transitions(c.Request().Context(), cbdash.TransitionQuery{Service: svc, From: sp.from, To: sp.to, Limit: maxTimelineTr})
	if err != nil {
		return err
	}
	deps := s.col.Dependencies()
	v := templates.Timeline{Page: s.page(c, "Timeline", "timeline"), Service: svc, RangeText: sp.text(), X0: timelineX0, W: timelineW}
	base := url.Values{}
	if svc != "" {
		base.Set("service", svc)
	}
	v.Ranges = rangeLinks("/timeline", base, sp.name)
	v.Custom = customForm("/timeline", base, sp, sp.fromQ != "")
	// Before cbdash heard of any instance there is nothing to show: the
	// lanes' closed background starts at the first record.
	v.BgX = 0
	first, err := s.history.FirstSeen(c.Request().Context())
	if err != nil {
		return err
	}
	if !first.IsZero() && first.After(sp.from) {
		v.BgX = min(timelineW, xOf(first, sp))
		v.NoDataUntil = timeOfDay(first) + " UTC"
	}
	v.Axis = timeTicks(sp.from, sp.to, func(t time.Time) float64 { return xOf(t, sp) })
	services := map[string]bool{}
	for _, d := range deps {
		services[d.Service] = true
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v.Services = append(v.Services, templates.Option{Value: n, Text: n, Selected: n == svc})
	}
	alive, err := s.notClosedSpans(c.Request().Context(), recs, deps, svc, sp, now)
	if err != nil {
		return err
	}
	v.Lanes, v.Quiet = lanes(recs, deps, svc, sp, now, alive)
	v.H = templates.LaneTop + float64(len(v.Lanes))*templates.LaneStep
	return render(c, http.StatusOK, templates.TimelinePage(v))
}

func xOf(t time.Time, sp span) float64 {
	return float64(t.Sub(sp.from)) / float64(sp.to.Sub(sp.from)) * timelineW
}

type laneData struct {
	key   cbdash.DependencyKey
	first time.Time
	lane  templates.Lane
}

// lanes replays each dependency's transitions over the range. An
// instance's state at the start is the From of its first transition in
// the range, or its current state when it has none.
//
// alive, when it has an entry for a dependency, holds the stretches in
// which its instances reported a state other than closed (from the stored
// window reports); a lane is drawn only inside them, so an instance that
// stopped reporting while open does not paint the lane open until it
// comes back.
func lanes(recs []cbdash.TransitionRecord, deps []cbdash.Dependency, svc string, sp span, now time.Time, alive map[cbdash.DependencyKey][]interval) ([]templates.Lane, int) {
	byDep := map[cbdash.DependencyKey][]cbdash.TransitionRecord{}
	for _, r := range recs {
		k := cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker}
		byDep[k] = append(byDep[k], r)
	}
	current := map[cbdash.DependencyKey]cbdash.Dependency{}
	total := 0
	for _, d := range deps {
		if svc != "" && d.Service != svc {
			continue
		}
		total++
		current[d.DependencyKey] = d
		if d.State != "" && d.State != protocol.StateClosed {
			if _, ok := byDep[d.DependencyKey]; !ok {
				byDep[d.DependencyKey] = nil
			}
		}
	}
	var out []laneData
	for k, rs := range byDep {
		mask, masked := alive[k]
		if !masked {
			mask = nil
		}
		if l, ok := lane(k, rs, current[k], sp, now, mask, masked); ok {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].first.Equal(out[j].first) {
			return out[i].first.Before(out[j].first)
		}
		return out[i].key.String() < out[j].key.String()
	})
	if len(out) > maxLanes {
		out = out[:maxLanes]
	}
	res := make([]templates.Lane, len(out))
	for i, l := range out {
		res[i] = l.lane
	}
	return res, max(0, max(total, len(byDep))-len(res))
}

func lane(k cbdash.DependencyKey, rs []cbdash.TransitionRecord, d cbdash.Dependency, sp span, now time.Time, mask []interval, masked bool) (laneData, bool) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].At < rs[j].At })
	state := map[string]string{}
	for _, in := range d.PerInstance {
		if !in.Stale {
			state[in.Instance] = in.State
		}
	}
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Instance] {
			seen[r.Instance] = true
			state[r.Instance] = r.From
		}
	}
	instances := max(len(state), liveCount(d))
	ld := laneData{key: k, lane: templates.Lane{Title: k.String(), Href: depHref(k)}}
	at := sp.from
	emit := func(until time.Time) {
		if !until.After(at) {
			return
		}
		worst, n := "", 0
		for _, st := range state {
			if st != protocol.StateClosed && st != "" {
				n++
				if worst == "" || stateRank(st) < stateRank(worst) {
					worst = st
				}
			}
		}
		if n == 0 {
			return
		}
		sv := stateView(worst)
		parts := []interval{{at, until}}
		if masked {
			parts = clip(interval{at, until}, mask)
		}
		for _, p := range parts {
			if ld.first.IsZero() {
				ld.first = p.from
			}
			end := earliest(now, p.to.Add(30*time.Minute)).Unix()
			ld.lane.Segments = append(ld.lane.Segments, templates.Segment{
				X: xOf(p.from, sp), W: max(1, xOf(p.to, sp)-xOf(p.from, sp)), Class: sv.Class,
				Title: sv.Text + " on " + strconv.Itoa(n) + " of " + strconv.Itoa(instances) + " · " + timeOfDay(p.from) + "–" + timeOfDay(p.to) + " UTC",
				Href:  depHref(k) + "&" + url.Values{"range": {"1h"}, "end": {strconv.FormatInt(end, 10)}}.Encode(),
			})
		}
	}
	for _, r := range rs {
		t := time.UnixMilli(r.At)
		if t.Before(sp.from) {
			t = sp.from
		}
		emit(t)
		if t.After(at) {
			at = t
		}
		state[r.Instance] = r.To
	}
	emit(earliest(sp.to, now))
	return ld, len(ld.lane.Segments) > 0
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// interval is a stretch of time [from, to).
type interval struct{ from, to time.Time }

// clip returns the parts of iv inside the sorted, disjoint intervals of mask.
func clip(iv interval, mask []interval) []interval {
	var out []interval
	for _, m := range mask {
		from, to := iv.from, iv.to
		if m.from.After(from) {
			from = m.from
		}
		if m.to.Before(to) {
			to = m.to
		}
		if to.After(from) {
			out = append(out, interval{from, to})
		}
	}
	return out
}

// notClosedSpans reads, for each dependency that has transitions in the
// range, the stretches in which at least one instance reported a state
// other than closed, at minute resolution (seconds for ranges of 15
// minutes or less). A stretch that reaches the last stored bucket is
// extended to now when that bucket is recent, since the newest seconds
// may not be stored yet.
func (s *Server) notClosedSpans(ctx context.Context, recs []cbdash.TransitionRecord, deps []cbdash.Dependency, svc string, sp span, now time.Time) (map[cbdash.DependencyKey][]interval, error) {
	keys := map[cbdash.DependencyKey]bool{}
	for _, r := range recs {
		keys[cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker}] = true
	}
	for _, d := range deps {
		if (svc == "" || d.Service == svc) && d.State != "" && d.State != protocol.StateClosed {
			keys[d.DependencyKey] = true
		}
	}
	if len(keys) > maxLanes {
		return nil, nil // too many to look up; lanes stay unmasked
	}
	res := cbdash.ResolutionMinute
	if sp.to.Sub(sp.from) <= 15*time.Minute {
		res = cbdash.ResolutionSecond
	}
	out := make(map[cbdash.DependencyKey][]interval, len(keys))
	for k := range keys {
		pts, err := s.history.History(ctx, cbdash.HistoryQuery{DependencyKey: k, From: sp.from, To: sp.to, Resolution: res})
		if err != nil {
			return nil, err
		}
		out[k] = openStretches(pts, now)
	}
	return out, nil
}

// openStretches merges the buckets with Open > 0 into sorted intervals.
func openStretches(pts []cbdash.Point, now time.Time) []interval {
	var out []interval
	for _, p := range pts {
		if p.Open <= 0 {
			continue
		}
		iv := interval{p.At, p.At.Add(p.Width)}
		if n := len(out); n > 0 && !iv.from.After(out[n-1].to) {
			if iv.to.After(out[n-1].to) {
				out[n-1].to = iv.to
			}
			continue
		}
		out = append(out, iv)
	}
	if n := len(out); n > 0 && now.Sub(out[n-1].to) < 10*time.Second && now.After(out[n-1].to) {
		out[n-1].to = now
	}
	return out
}
