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

// overview renders one page of tiles (tilesPerPage), filtered and sorted
// as asked; the live socket, asked for the same filter and page, keeps
// them current.
func (s *Server) overview(c echo.Context) error {
	f := parseFilter(c.QueryParams())
	p := s.page(c, "Overview", "overview")
	deps := s.col.Dependencies()
	pg := pageOf(pointers(deps), f)
	f.Page = pg.Page // a page past the last shows the last, and the socket follows it
	p.LiveURL = "/live?" + withView(f.values(), "overview").Encode()
	shown := valuesOf(pg.Deps)
	sparks := s.sparks.get(c.Request().Context(), keysOf(shown), pageSparkBudget)
	v := overviewModel(p, pg, fleet(deps), f, sparks, s.trips(c.Request().Context(), shown), s.now())
	v.Alerts = s.alertsCount()
	var err error
	if v.FleetTimeline, err = s.fleetTimeline(c.Request().Context(), s.now()); err != nil {
		return err
	}
	return render(c, http.StatusOK, templates.OverviewPage(v))
}

// valuesOf copies the dependencies deps point at.
func valuesOf(deps []*cbdash.Dependency) []cbdash.Dependency {
	vs := make([]cbdash.Dependency, len(deps))
	for i, d := range deps {
		vs[i] = *d
	}
	return vs
}

func keysOf(deps []cbdash.Dependency) []cbdash.DependencyKey {
	ks := make([]cbdash.DependencyKey, len(deps))
	for i, d := range deps {
		ks[i] = d.DependencyKey
	}
	return ks
}
