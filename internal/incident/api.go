package incident

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
)

// API serves the incidents JSON API. It is safe for concurrent use.
type API struct {
	store Store
	clk   clock.Clock
	actor func(echo.Context) string
}

// NewAPI returns the API over store. clk stamps notes and ends open
// incidents' reports (nil = clock.System()); actor names the user of a
// request for notes (nil = the note's "author" field, or "anonymous").
func NewAPI(store Store, clk clock.Clock, actor func(echo.Context) string) *API {
	return &API{store: store, clk: clock.OrSystem(clk), actor: actor}
}

// Mount registers, under /api/v1, GET incidents (filters service, breaker,
// from, to as RFC 3339 or Unix ms, open=true, limit), GET incidents/:id
// (the Report), GET incidents/:id/export.md and export.json, protected by
// read, and POST incidents/:id/notes ({"text": "..."}) protected by
// operate. A nil middleware lets every request through. Errors are
// returned wrapped (cbdash.ErrNotFound, cbdash.ErrInvalid) for the
// server's error handler.
func (a *API) Mount(e *echo.Echo, read, operate echo.MiddlewareFunc) {
	read, operate = orPass(read), orPass(operate)
	e.GET("/api/v1/incidents", a.list, read)
	e.GET("/api/v1/incidents/:id", a.get, read)
	e.GET("/api/v1/incidents/:id/export.md", a.exportMarkdown, read)
	e.GET("/api/v1/incidents/:id/export.json", a.exportJSON, read)
	e.POST("/api/v1/incidents/:id/notes", a.addNote, operate)
}

func orPass(m echo.MiddlewareFunc) echo.MiddlewareFunc {
	if m == nil {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return m
}

// ParseQuery reads an IncidentQuery from URL values service, breaker,
// from, to (RFC 3339 or Unix ms), open ("true"/"1") and limit. Errors wrap
// cbdash.ErrInvalid and name the parameter.
func ParseQuery(get func(string) string) (cbdash.IncidentQuery, error) {
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
		return q, fmt.Errorf("open must be true or false: %w", cbdash.ErrInvalid)
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10000 {
			return q, fmt.Errorf("limit must be within 0..10000: %w", cbdash.ErrInvalid)
		}
		q.Limit = n
	}
	return q, nil
}

func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s must be RFC 3339 or Unix ms (got %q): %w", name, v, cbdash.ErrInvalid)
}

func (a *API) list(c echo.Context) error {
	q, err := ParseQuery(c.QueryParam)
	if err != nil {
		return err
	}
	list, err := a.store.Incidents(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if list == nil {
		list = []cbdash.Incident{}
	}
	return c.JSON(http.StatusOK, list)
}

func idParam(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("incident id %q: %w", c.Param("id"), cbdash.ErrNotFound)
	}
	return id, nil
}

// report reads an incident and builds its report.
func (a *API) report(c echo.Context) (Report, error) {
	id, err := idParam(c)
	if err != nil {
		return Report{}, err
	}
	inc, err := a.store.Incident(c.Request().Context(), id)
	if err != nil {
		return Report{}, err
	}
	return Build(c.Request().Context(), a.store, inc, a.clk.Now())
}

func (a *API) get(c echo.Context) error {
	rep, err := a.report(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

func (a *API) exportMarkdown(c echo.Context) error {
	rep, err := a.report(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="incident-%d.md"`, rep.Incident.ID))
	return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", Markdown(rep.Own()))
}

func (a *API) exportJSON(c echo.Context) error {
	rep, err := a.report(c)
	if err != nil {
		return err
	}
	b, err := JSON(rep.Own())
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="incident-%d.json"`, rep.Incident.ID))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}

// MaxNoteLen bounds an operator note, in bytes.
const MaxNoteLen = 10000

func (a *API) addNote(c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	var body struct {
		Text   string `json:"text"`
		Author string `json:"author"`
	}
	if err := c.Bind(&body); err != nil {
		return fmt.Errorf("note body: %v: %w", err, cbdash.ErrInvalid)
	}
	n, err := a.AddNote(c, id, body.Text, body.Author)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, n)
}

// AddNote validates and stores a note on incident id, by the request's
// actor (or author when there is no actor). Errors wrap cbdash.ErrInvalid
// (empty or too long text) or cbdash.ErrNotFound.
func (a *API) AddNote(c echo.Context, id int64, text, author string) (cbdash.IncidentNote, error) {
	text = strings.TrimSpace(text)
	if text == "" || len(text) > MaxNoteLen {
		return cbdash.IncidentNote{}, fmt.Errorf("note text must be 1..%d bytes: %w", MaxNoteLen, cbdash.ErrInvalid)
	}
	if a.actor != nil {
		author = a.actor(c)
	}
	if author == "" {
		author = "anonymous"
	}
	return a.store.AddIncidentNote(c.Request().Context(), cbdash.IncidentNote{IncidentID: id, At: a.clk.Now(), Author: author, Text: text})
}
