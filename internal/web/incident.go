package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// IncidentStore is what the incident pages read and write. *store.Store
// implements it; it is Config.Incidents, and without it the incident
// pages, their live views and the incidents API answer 404.
type IncidentStore interface {
	incident.Reader
	Incident(ctx context.Context, id int64) (cbdash.Incident, error)
	Incidents(ctx context.Context, q cbdash.IncidentQuery) ([]cbdash.Incident, error)
	AddIncidentNote(ctx context.Context, n cbdash.IncidentNote) (cbdash.IncidentNote, error)
	// Instances gives the last known configuration of every breaker, for
	// the thresholds of a dependency that is no longer live.
	Instances(ctx context.Context) ([]cbdash.InstanceBreaker, error)
}

// mountIncidents registers the incident pages: read for the list and an
// incident, op for adding a note.
func (s *Server) mountIncidents(read, op routes) {
	read.GET("/incidents", s.incidentsPage)
	read.GET("/incidents/:id", s.incidentPage)
	op.POST("/incidents/:id/notes", s.incidentNote)
}

func (s *Server) incidents() (IncidentStore, error) {
	if s.cfg.Incidents == nil {
		return nil, errorf(cbdash.ErrNotFound, "incidents are not recorded by this server")
	}
	return s.cfg.Incidents, nil
}

const formTime = "2006-01-02T15:04"

// incidentsPage lists incidents newest first; ?fragment=1 answers only the
// table, which the page polls.
func (s *Server) incidentsPage(c echo.Context) error {
	is, err := s.incidents()
	if err != nil {
		return err
	}
	q, err := parseIncidentQuery(c.QueryParam)
	if err != nil {
		return err
	}
	rows, err := s.incidentRows(c.Request().Context(), is, q)
	if err != nil {
		return err
	}
	params := url.Values{}
	for _, k := range []string{"service", "breaker", "from", "to", "open"} {
		if v := c.QueryParam(k); v != "" {
			params.Set(k, v)
		}
	}
	params.Set("fragment", "1")
	fragment := "/incidents?" + params.Encode()
	if c.QueryParam("fragment") != "" {
		return render(c, http.StatusOK, templates.IncidentList(rows, fragment))
	}
	f := templates.IncidentFilter{Service: q.Service, Breaker: q.Breaker, Open: q.OpenOnly}
	if !q.From.IsZero() {
		f.From = q.From.Format(formTime)
	}
	if !q.To.IsZero() {
		f.To = q.To.Format(formTime)
	}
	services := map[string]bool{q.Service: q.Service != ""}
	for _, d := range s.col.Dependencies() {
		services[d.Service] = true
	}
	for name, ok := range services {
		if ok {
			f.Services = append(f.Services, templates.Option{Value: name, Text: name, Selected: name == q.Service})
		}
	}
	slices.SortFunc(f.Services, func(a, b templates.Option) int { return strings.Compare(a.Value, b.Value) })
	p := s.page(c, "Incidents", "incidents")
	live := c.QueryParams()
	live.Del("fragment")
	p.LiveURL = "/live?" + withView(live, "incidents").Encode()
	return render(c, http.StatusOK, templates.IncidentsPage(templates.Incidents{
		Page: p, Filter: f, Rows: rows, Fragment: fragment,
	}))
}

// incidentRows lists the incidents of q, newest first, at the server's now.
func (s *Server) incidentRows(ctx context.Context, is IncidentStore, q cbdash.IncidentQuery) ([]templates.IncidentRow, error) {
	list, err := is.Incidents(ctx, q)
	if err != nil {
		return nil, err
	}
	now := s.now()
	rows := make([]templates.IncidentRow, 0, len(list))
	for _, inc := range list {
		rows = append(rows, incidentRow(inc, now))
	}
	return rows, nil
}

func incidentHref(id int64) string { return "/incidents/" + strconv.FormatInt(id, 10) }

func incidentState(open bool) templates.State {
	if open {
		return templates.State{Class: "open", Text: "open"}
	}
	return templates.State{Class: "closed", Text: "resolved"}
}

func incidentRow(inc cbdash.Incident, now time.Time) templates.IncidentRow {
	return templates.IncidentRow{
		ID: "#" + strconv.FormatInt(inc.ID, 10), Href: incidentHref(inc.ID),
		Dependency: inc.DependencyKey.String(), DepHref: depHref(inc.DependencyKey),
		Start: stamp(inc.Start), Duration: exactDuration(inc.Duration(now)), State: incidentState(inc.Open),
		Instances: fmt.Sprintf("%d (%s)", len(inc.Instances), strings.Join(inc.Instances, ", ")),
		Opens:     inc.Opens, Cause: incident.CauseText(inc.FirstCause),
	}
}

func incidentID(c echo.Context) (int64, error) { return idParam(c, "incident") }

// incidentPage renders one incident: summary, lanes, charts, timeline.
func (s *Server) incidentPage(c echo.Context) error {
	is, err := s.incidents()
	if err != nil {
		return err
	}
	id, err := incidentID(c)
	if err != nil {
		return err
	}
	p := s.page(c, fmt.Sprintf("Incident %d", id), "incidents")
	v, open, err := s.incidentModel(c.Request().Context(), is, id, p)
	if err != nil {
		return err
	}
	if open { // the page follows the incident until it ends
		v.Page.LiveURL = "/live?" + url.Values{"view": {"incident"}, "id": {strconv.FormatInt(id, 10)}}.Encode()
	}
	return render(c, http.StatusOK, templates.IncidentPage(v))
}

// incidentModel builds the incident page's view model at the server's
// now; open says whether the incident is still open.
func (s *Server) incidentModel(ctx context.Context, is IncidentStore, id int64, p templates.Page) (templates.Incident, bool, error) {
	inc, err := is.Incident(ctx, id)
	if err != nil {
		return templates.Incident{}, false, err
	}
	rep, err := incident.Build(ctx, is, inc, s.now())
	if err != nil {
		return templates.Incident{}, false, err
	}
	// Thresholds come from the live configuration when the dependency is
	// still known; the lanes tell how many instances there were.
	d, err := s.col.Dependency(inc.DependencyKey)
	if err != nil {
		if d, err = storedDependency(ctx, is, inc.DependencyKey, len(rep.Lanes)); err != nil {
			return templates.Incident{}, false, err
		}
	}
	// Before cbdash heard of the fleet (and before this dependency's first
	// record) nothing is known: the lanes leave that time blank, as the
	// timeline page does, rather than paint it closed.
	first, err := s.history.FirstSeen(ctx)
	if err != nil {
		return templates.Incident{}, false, err
	}
	known := knownFrom(rep, first)
	base := "/api/v1/incidents/" + strconv.FormatInt(id, 10)
	v := templates.Incident{
		Page: p, ID: "#" + strconv.FormatInt(id, 10), Service: inc.Service, Breaker: inc.Breaker,
		DepHref: depHref(inc.DependencyKey), State: incidentState(inc.Open),
		Summary:  summaryItems(rep.Summary),
		Lanes:    incidentLanes(rep, known),
		Charts:   dependencyCharts(rep.Points, rep.From, rep.To, d),
		Timeline: timelineRows(rep),
		CanNote:  p.CanOp, NoteAction: incidentHref(id) + "/notes",
		ExportMD: base + "/export.md", ExportJSON: base + "/export.json",
		RangeText: stamp(rep.From) + " to " + stamp(rep.To),
	}
	for _, n := range inc.Notes {
		v.Notes = append(v.Notes, templates.NoteView{At: stamp(n.At), Author: n.Author, Text: n.Text})
	}
	return v, inc.Open, nil
}

// storedDependency is a dependency rebuilt from the stored instances
// (configurations only), for a dependency the collector no longer knows.
// Its lines have a zero window, and a zero configuration where the store
// has none, as the collector's (never nil).
func storedDependency(ctx context.Context, is IncidentStore, k cbdash.DependencyKey, instances int) (cbdash.Dependency, error) {
	d := cbdash.Dependency{DependencyKey: k, Instances: instances}
	ibs, err := is.Instances(ctx)
	if err != nil {
		return d, err
	}
	for i := range ibs {
		if ib := &ibs[i]; ib.Service == k.Service && ib.Breaker == k.Breaker {
			if ib.Config == nil {
				ib.Config = &protocol.BreakerConfig{}
			}
			if ib.Last == nil {
				ib.Last = &protocol.Window{}
			}
			d.PerInstance = append(d.PerInstance, ib)
		}
	}
	return d, nil
}

func summaryItems(s incident.Summary) []templates.SummaryItem {
	end := "still open"
	if !s.Open {
		end = stamp(s.End)
	}
	ttfo := "no failures before the trip"
	if !s.DegradedSince.IsZero() {
		ttfo = exactDuration(s.TimeToFirstOpen) + " (failures from " + timeOfDay(s.DegradedSince) + ")"
	}
	return []templates.SummaryItem{
		{Label: "start", Value: stamp(s.Start), TestID: "sum-start"},
		{Label: "end", Value: end, TestID: "sum-end"},
		{Label: "duration", Value: exactDuration(s.Duration), TestID: "sum-duration"},
		{Label: "time to first open", Value: ttfo, TestID: "sum-ttfo"},
		{Label: "instances affected", Value: fmt.Sprintf("%d (%s)", len(s.Instances), strings.Join(s.Instances, ", ")), TestID: "sum-instances"},
		{Label: "opens", Value: strconv.Itoa(s.Opens), TestID: "sum-opens"},
		{Label: "calls rejected", Value: strconv.FormatInt(s.CallsRejected, 10), TestID: "sum-rejected"},
		{Label: "fallback calls", Value: wording.FallbackCalls(s.FallbackSuccesses, s.FallbacksFailed), TestID: "sum-fallbacks"},
		{Label: "first trip", Value: s.FirstInstance + ": " + s.Cause, TestID: "sum-cause"},
	}
}

// Lane geometry, in the charts' viewBox units so that lanes and charts
// share one time axis.
const (
	laneTop  = 40.0 // room for two rows of marker labels
	laneStep = 30.0 // instance name above a 16-unit bar
)

// knownFrom is when the report's record starts: the earlier of the
// fleet's first record (first, zero when none) and the dependency's first
// point, transition or command in the report; zero when the record covers
// the report's whole span.
func knownFrom(rep incident.Report, first time.Time) time.Time {
	known := first
	earlier := func(t time.Time) {
		if !t.IsZero() && (known.IsZero() || t.Before(known)) {
			known = t
		}
	}
	for _, p := range rep.Points {
		earlier(p.At)
	}
	for _, e := range rep.Timeline {
		earlier(e.At)
	}
	if known.IsZero() || !known.After(rep.From) {
		return time.Time{}
	}
	return known
}

// incidentLanes draws the report's lanes; known, when not zero, is when
// the record starts: spans before it are cut away, that time left blank.
func incidentLanes(rep incident.Report, known time.Time) templates.IncidentLanes {
	span := rep.To.Sub(rep.From)
	x := func(t time.Time) float64 {
		if span <= 0 {
			return chartLeft
		}
		f := float64(t.Sub(rep.From)) / float64(span)
		return chartLeft + max(0, min(1, f))*(chartRight-chartLeft)
	}
	l := templates.IncidentLanes{W: chartW, Left: chartLeft, Right: chartRight, Top: laneTop, Step: laneStep}
	l.H = max(chartH, laneTop+float64(len(rep.Lanes))*laneStep+20)
	l.Axis = timeTicks(rep.From, rep.To, x)
	if !known.IsZero() {
		l.NoDataUntil = timeOfDay(known) + " UTC"
	}
	for _, lane := range rep.Lanes {
		il := templates.IncidentLane{Instance: lane.Instance}
		for _, sp := range lane.Spans {
			if !known.IsZero() {
				if !sp.To.After(known) {
					continue
				}
				sp.From = later(sp.From, known)
			}
			st := stateView(sp.State)
			il.Spans = append(il.Spans, templates.Segment{X: x(sp.From), W: max(0.5, x(sp.To)-x(sp.From)), Class: st.Class,
				Title: fmt.Sprintf("%s: %s from %s to %s (%s)", lane.Instance, st.Text, timeOfDay(sp.From), timeOfDay(sp.To), exactDuration(sp.To.Sub(sp.From)))})
		}
		l.Lanes = append(l.Lanes, il)
	}
	l.Markers = append(l.Markers, templates.Marker{X: x(rep.Incident.Start), Kind: "start", Label: "start", Title: "incident start " + stamp(rep.Incident.Start)})
	if !rep.Incident.Open {
		l.Markers = append(l.Markers, templates.Marker{X: x(rep.Incident.End), Kind: "end", Label: "end", Title: "last instance closed " + stamp(rep.Incident.End)})
	}
	for _, cmd := range rep.Commands {
		l.Markers = append(l.Markers, templates.Marker{X: x(cmd.IssuedAt), Kind: "command", Label: "cmd",
			Title: timeOfDay(cmd.IssuedAt) + " " + incident.CommandText(cmd)})
	}
	for _, cc := range rep.ConfigChanges {
		l.Markers = append(l.Markers, templates.Marker{X: x(cc.At), Kind: "config", Label: "cfg",
			Title: timeOfDay(cc.At) + " " + cc.Instance + ": configuration changed: " + incident.ConfigDiff(cc.Previous, cc.Config)})
	}
	// Labels alternate between two rows so that close markers stay legible.
	slices.SortStableFunc(l.Markers, func(a, b templates.Marker) int { return cmpFloat(a.X, b.X) })
	for i := range l.Markers {
		l.Markers[i].Row = i % 2
	}
	return l
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func timelineRows(rep incident.Report) templates.IncidentTimeline {
	var tl templates.IncidentTimeline
	for _, e := range rep.Timeline {
		off := e.At.Sub(rep.Incident.Start)
		sign := "+"
		if off < 0 {
			sign, off = "-", -off
		}
		r := templates.TimelineRow{At: timeOfDay(e.At), Offset: sign + exactDuration(off), Kind: e.Kind, Instance: e.Instance, Text: e.Text, Outside: e.Outside}
		switch e.Outside {
		case incident.OutsideBefore:
			tl.Before = append(tl.Before, r)
		case incident.OutsideAfter:
			tl.After = append(tl.After, r)
		default:
			tl.Own = append(tl.Own, r)
		}
	}
	return tl
}

// incidentNote adds an operator's note and goes back to the incident.
func (s *Server) incidentNote(c echo.Context) error {
	is, err := s.incidents()
	if err != nil {
		return err
	}
	id, err := incidentID(c)
	if err != nil {
		return err
	}
	if _, err := incident.NewNotes(is, s.cfg.Clock).AddNote(c.Request().Context(), actorFrom(c), id, c.FormValue("text")); err != nil {
		return err
	}
	return redirect(c, incidentHref(id))
}

// exactDuration prints a duration to the second (to the millisecond under
// a second), which an incident's timeline needs.
func exactDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
