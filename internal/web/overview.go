package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

// pageSparkBudget bounds the time a page render spends fetching
// sparklines from the store.
const pageSparkBudget = 40 * time.Millisecond

// overview renders every dependency as a tile, filtered and sorted as
// asked; the live socket keeps the tiles current.
func (s *Server) overview(c echo.Context) error {
	f := parseFilter(c.QueryParams())
	p := s.page(c, "Overview", "overview")
	p.LiveURL = "/live?" + withView(f.values(), "overview").Encode()
	deps := s.col.Dependencies()
	sparks := s.sparks.get(c.Request().Context(), keysOf(deps), pageSparkBudget)
	v := overviewModel(p, deps, f, sparks, s.trips(c.Request().Context(), deps), s.now())
	v.Alerts = s.alertsCount()
	var err error
	if v.FleetTimeline, err = s.fleetTimeline(c.Request().Context(), s.now()); err != nil {
		return err
	}
	return render(c, http.StatusOK, templates.OverviewPage(v))
}

func keysOf(deps []cbdash.Dependency) []cbdash.DependencyKey {
	ks := make([]cbdash.DependencyKey, len(deps))
	for i, d := range deps {
		ks[i] = d.DependencyKey
	}
	return ks
}
