package web

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
)

// mountIncidentsAPI registers, under /api/v1: GET incidents (filters
// service, breaker, from, to, open=true, limit), GET incidents/:id (the
// incident.Report), GET incidents/:id/export.md and export.json (read),
// and POST incidents/:id/notes ({"text": "..."}) as the caller (op).
func (s *Server) mountIncidentsAPI(read, op routes) {
	read.GET("/api/v1/incidents", s.apiIncidents)
	read.GET("/api/v1/incidents/:id", s.apiIncident)
	read.GET("/api/v1/incidents/:id/export.md", s.apiIncidentMarkdown)
	read.GET("/api/v1/incidents/:id/export.json", s.apiIncidentJSON)
	op.POST("/api/v1/incidents/:id/notes", s.apiIncidentNote)
}

// parseIncidentQuery reads an IncidentQuery from parameters service,
// breaker, from, to (see parseTime), open ("true"/"1"/"on" or
// "false"/"0") and limit (0..10000). Errors wrap cbdash.ErrInvalid and
// name the parameter.
func parseIncidentQuery(get func(string) string) (cbdash.IncidentQuery, error) {
	q := cbdash.IncidentQuery{Service: get("service"), Breaker: get("breaker")}
	var err error
	if q.From, err = parseTime("from", get("from")); err != nil {
		return q, err
	}
	if q.To, err = parseTime("to", get("to")); err != nil {
		return q, err
	}
	switch get("open") {
	case "", "false", "0":
	case "true", "1", "on":
		q.OpenOnly = true
	default:
		return q, errorf(cbdash.ErrInvalid, "open must be true or false")
	}
	q.Limit, err = limitParam(get, 10000)
	return q, err
}

func (s *Server) apiIncidents(c echo.Context) error {
	is, err := s.incidents()
	if err != nil {
		return err
	}
	q, err := parseIncidentQuery(c.QueryParam)
	if err != nil {
		return err
	}
	list, err := is.Incidents(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if list == nil {
		list = []cbdash.Incident{}
	}
	return c.JSON(http.StatusOK, list)
}

// incidentReport reads the :id incident and builds its report.
func (s *Server) incidentReport(c echo.Context) (incident.Report, error) {
	is, err := s.incidents()
	if err != nil {
		return incident.Report{}, err
	}
	id, err := incidentID(c)
	if err != nil {
		return incident.Report{}, err
	}
	inc, err := is.Incident(c.Request().Context(), id)
	if err != nil {
		return incident.Report{}, err
	}
	return incident.Build(c.Request().Context(), is, inc, s.now())
}

func (s *Server) apiIncident(c echo.Context) error {
	rep, err := s.incidentReport(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

func (s *Server) apiIncidentMarkdown(c echo.Context) error {
	rep, err := s.incidentReport(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="incident-%d.md"`, rep.Incident.ID))
	return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", incident.Markdown(rep.Own()))
}

func (s *Server) apiIncidentJSON(c echo.Context) error {
	rep, err := s.incidentReport(c)
	if err != nil {
		return err
	}
	b, err := incident.JSON(rep.Own())
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="incident-%d.json"`, rep.Incident.ID))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}

// apiIncidentNote adds {"text": "..."} to an incident as the caller (a
// body's "author" is ignored).
func (s *Server) apiIncidentNote(c echo.Context) error {
	is, err := s.incidents()
	if err != nil {
		return err
	}
	id, err := incidentID(c)
	if err != nil {
		return err
	}
	var body struct {
		Text string `json:"text"`
	}
	if err := decodeBody(c, "note body", &body); err != nil {
		return err
	}
	n, err := incident.NewNotes(is, s.cfg.Clock).AddNote(c.Request().Context(), actorFrom(c), id, body.Text)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, n)
}
