package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
)

// API is what the JSON API needs from the collector besides Collector:
// its queries, its audited actions (each with the actor explicitly), and
// the transports that are streams of their own, as net/http handlers that
// return the error to answer. *collector.Collector implements it.
type API interface {
	Services() []collector.Service
	// History and Gaps serve a dependency that is live or in the store;
	// cbdash.ErrNotFound otherwise.
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
	Gaps(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Gap, error)
	// Readiness is "ready" and nil, or why not (see collector.Readiness).
	Readiness(ctx context.Context) (status string, cause error)
	ServeAgent(w http.ResponseWriter, r *http.Request) error
	ServeIngest(w http.ResponseWriter, r *http.Request) error
	ServeEvents(w http.ResponseWriter, r *http.Request) error
	ServeMetrics(w http.ResponseWriter, r *http.Request) error
}

// mountAPI registers the JSON API (see the OpenAPI document, openapi.yaml,
// served at /api/v1/openapi.json): open routes (health, readiness,
// metrics with its own token, the agents' transports with agent tokens,
// the document), then read (viewer role) and op (operator role, CSRF for
// sessions; the actor of every audited action) route groups.
func (s *Server) mountAPI(open, read, op routes) {
	open.GET("/healthz", s.healthz)
	open.GET("/readyz", s.readyz)
	open.GET("/metrics", s.metricsPage)
	open.GET("/api/v1/agent", s.agentSocket)
	open.POST("/api/v1/ingest", s.ingest)
	open.GET("/api/v1/openapi.json", s.openAPI)

	read.GET("/api/v1/events", s.events)
	s.mountBreakersAPI(read, op)  // api_breakers.go
	s.mountHoldsAPI(read, op)     // api_holds.go
	s.mountSchedulesAPI(read, op) // api_schedules.go
	s.mountIncidentsAPI(read, op)
	s.mountAlertsAPI(read, op)
	s.mountTuneAPI(read) // tune.go
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 200 {"status": "ready"}, or 503 {"status": ..., "error": why}.
func (s *Server) readyz(c echo.Context) error {
	status, err := s.col.Readiness(c.Request().Context())
	switch {
	case status == "ready":
		return c.JSON(http.StatusOK, map[string]string{"status": status})
	case err != nil:
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": status, "error": err.Error()})
	}
	return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": status})
}

func (s *Server) metricsPage(c echo.Context) error {
	return s.col.ServeMetrics(c.Response(), c.Request())
}
func (s *Server) agentSocket(c echo.Context) error {
	return s.col.ServeAgent(c.Response(), c.Request())
}
func (s *Server) ingest(c echo.Context) error { return s.col.ServeIngest(c.Response(), c.Request()) }

// events is the event stream (server-sent events), capped per session or
// API token, per client address and in total (Config.Events): a stream
// over a cap is refused with 429 and the cap it hit, before the
// collector subscribes it.
func (s *Server) events(c echo.Context) error {
	release, refused := s.streams.take(liveSessionKey(c), c.RealIP())
	if release == nil {
		s.log.Info("event stream refused", "address", c.RealIP(), "reason", refused)
		return echo.NewHTTPError(http.StatusTooManyRequests, refused)
	}
	defer release()
	return s.col.ServeEvents(c.Response(), c.Request())
}

// decodeBody decodes a JSON request body into v; what names the request
// in the error ("hold request: ttl: expected ..."), which wraps
// cbdash.ErrInvalid (a body over its limit is the 413 of limitBodies).
func decodeBody(c echo.Context, what string, v any) error {
	if err := json.NewDecoder(c.Request().Body).Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return errorf(cbdash.ErrInvalid, "%s: %s", what, cbdash.JSONReason(err))
	}
	return nil
}

// ttlField is a request's "ttl": nanoseconds as a number, or a Go
// duration string such as "10m".
type ttlField json.RawMessage

// UnmarshalJSON keeps the raw value for duration.
func (t *ttlField) UnmarshalJSON(b []byte) error {
	*t = append((*t)[:0], b...)
	return nil
}

func (t ttlField) duration() (time.Duration, error) {
	raw := []byte(t)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		return time.Duration(n), nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, errorf(cbdash.ErrInvalid, "ttl must be nanoseconds or a duration string")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errorf(cbdash.ErrInvalid, "ttl: %v", err)
	}
	return d, nil
}

// depKey is the dependency of a :service/:breaker path.
func depKey(c echo.Context) (cbdash.DependencyKey, error) {
	svc, err1 := url.PathUnescape(c.Param("service"))
	br, err2 := url.PathUnescape(c.Param("breaker"))
	if err1 != nil || err2 != nil {
		return cbdash.DependencyKey{}, errorf(cbdash.ErrInvalid, "bad escape in the path")
	}
	return cbdash.DependencyKey{Service: svc, Breaker: br}, nil
}

// idParam is the positive integer :id of a path; what names the thing in
// the not-found error ("incident", "alert rule").
func idParam(c echo.Context, what string) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errorf(cbdash.ErrNotFound, "%s %q", what, truncate(c.Param("id"), 40))
	}
	return id, nil
}

// limitParam reads ?limit= within 0..most (0 or absent: the default of
// the query).
func limitParam(get func(string) string, most int) (int, error) {
	v := get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > most {
		return 0, errorf(cbdash.ErrInvalid, "limit must be within 0..%d", most)
	}
	return n, nil
}

// parseTime reads a time parameter: Unix milliseconds, RFC 3339, or the
// forms' "2006-01-02T15:04" and "2006-01-02" (UTC); "" is the zero time.
func parseTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	for _, layout := range []string{time.RFC3339Nano, formTime, "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errorf(cbdash.ErrInvalid, "%s must be RFC 3339 or Unix milliseconds (got %q)", field, truncate(v, 40))
}

// timeRange reads ?from= and ?to= (see parseTime); to defaults to now and
// from to back before to; from must be before to.
func timeRange(get func(string) string, now time.Time, back time.Duration) (from, to time.Time, err error) {
	if to, err = parseTime("to", get("to")); err != nil {
		return
	}
	if to.IsZero() {
		to = now.UTC()
	}
	if from, err = parseTime("from", get("from")); err != nil {
		return
	}
	if from.IsZero() {
		from = to.Add(-back)
	}
	if !from.Before(to) {
		err = errorf(cbdash.ErrInvalid, "from must be before to")
	}
	return
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
