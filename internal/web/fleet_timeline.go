package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

// FleetHistory is what the overview's fleet line reads. *store.Store
// implements it; it is Config.FleetHistory, and without it the overview
// has no line.
type FleetHistory interface {
	FleetNotClosed(ctx context.Context, from, to time.Time) ([]cbdash.FleetMinute, error)
}

const fleetFragment = "/overview/fleet-timeline"

// fleetTimeline builds the overview's line of the last hour at now; nil
// when the server has no FleetHistory.
func (s *Server) fleetTimeline(ctx context.Context, now time.Time) (*templates.FleetTimeline, error) {
	fh := s.cfg.FleetHistory
	if fh == nil {
		return nil, nil
	}
	from := now.Truncate(time.Minute).Add(-59 * time.Minute)
	mins, err := fh.FleetNotClosed(ctx, from, now)
	if err != nil {
		return nil, err
	}
	return fleetTimelineModel(mins, from, now), nil
}

func fleetTimelineModel(mins []cbdash.FleetMinute, from, now time.Time) *templates.FleetTimeline {
	const cols = 60
	f := &templates.FleetTimeline{MaxInstances: 1, Fragment: fleetFragment}
	byMinute := map[int64]cbdash.FleetMinute{}
	var peak cbdash.FleetMinute
	for _, m := range mins {
		byMinute[m.Start.UnixMilli()] = m
		f.MaxInstances = max(f.MaxInstances, m.Instances)
		if m.Instances > peak.Instances {
			peak = m
		}
	}
	if peak.Instances > 0 {
		f.Peak = fmt.Sprintf("peak %s on %s at %s UTC", plural(peak.Instances, "instance", "instances"),
			plural(peak.Dependencies, "dependency", "dependencies"), peak.Start.Format("15:04"))
	}
	maxDeps := f.MaxInstances // dependencies are at most the instances: one scale
	w := 1000.0 / cols
	for i := range cols {
		at := from.Add(time.Duration(i) * time.Minute)
		m := byMinute[at.UnixMilli()]
		end := at.Add(8 * time.Minute)
		if end.After(now) { // the link's end is in whole seconds: not before now
			end = now.Add(time.Second)
		}
		href := "/timeline?" + url.Values{"range": {"15m"}, "end": {strconv.FormatInt(end.Unix(), 10)}}.Encode()
		bh := 96 * float64(m.Instances) / float64(f.MaxInstances)
		p := templates.FleetPoint{X: float64(i) * w, W: w, BarY: 100 - bh, BarH: bh,
			DotY: 100 - 96*float64(m.Dependencies)/float64(maxDeps), Instances: m.Instances, Deps: m.Dependencies,
			Href: href, Time: at.UTC().Format("15:04")}
		p.Title = fmt.Sprintf("%s UTC: %s not closed on %s; open the timeline then", p.Time,
			plural(m.Instances, "instance", "instances"), plural(m.Dependencies, "dependency", "dependencies"))
		f.Points = append(f.Points, p)
	}
	for _, i := range []int{0, 15, 30, 45, 59} {
		f.Ticks = append(f.Ticks, templates.Tick{Pos: min(max(float64(i)*w+w/2, 20), 980), Label: from.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")})
	}
	return f
}

// fleetTimelinePage answers the fleet line alone, which it polls.
func (s *Server) fleetTimelinePage(c echo.Context) error {
	f, err := s.fleetTimeline(c.Request().Context(), s.now())
	if err != nil {
		return err
	}
	if f == nil {
		return errorf(cbdash.ErrNotFound, "this server keeps no per-instance history")
	}
	return render(c, http.StatusOK, templates.FleetTimelineView(*f))
}
