package collector

import (
	"encoding/json"
	"net/http"

	"github.com/cbdash/cbdash"
	"github.com/labstack/echo/v4"
)

// mountHolds registers the hold endpoints:
//
//	GET  /api/v1/holds                 ?live=1: only live holds; ?limit=  auth.Read
//	GET  /api/v1/holds/:id             one hold with its coverage        auth.Read
//	GET  /api/v1/holds/:id/report      drill report; ?format=md: Markdown auth.Read
//	POST /api/v1/holds                 create (?dry_run=1: the blast radius only) auth.Operate
//	POST /api/v1/holds/:id/release     {"reason": "..."}                 auth.Operate
func (c *Collector) mountHolds(e *echo.Echo, read, operate echo.MiddlewareFunc) {
	e.GET("/api/v1/holds", c.getHolds, read)
	e.GET("/api/v1/holds/:id", c.getHold, read)
	e.GET("/api/v1/holds/:id/report", c.getHoldReport, read)
	e.POST("/api/v1/holds", c.postHold, operate)
	e.POST("/api/v1/holds/:id/release", c.postHoldRelease, operate)
}

func (c *Collector) getHolds(ec echo.Context) error {
	n, err := limit(ec, 5000)
	if err != nil {
		return err
	}
	hs, err := c.Holds(ec.Request().Context(), ec.QueryParam("live") == "1", n)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, hs)
}

func (c *Collector) getHold(ec echo.Context) error {
	h, err := c.Hold(ec.Request().Context(), ec.Param("id"))
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, h)
}

func (c *Collector) getHoldReport(ec echo.Context) error {
	r, err := c.HoldReport(ec.Request().Context(), ec.Param("id"))
	if err != nil {
		return err
	}
	if ec.QueryParam("format") == "md" {
		return ec.Blob(http.StatusOK, "text/markdown; charset=utf-8", HoldReportMarkdown(r))
	}
	return ec.JSON(http.StatusOK, r)
}

// postHold creates a hold from a JSON cbdash.HoldRequest (ttl in
// nanoseconds, or a Go duration string such as "10m"); with ?dry_run=1 it
// answers the cbdash.HoldPlan instead and changes nothing.
func (c *Collector) postHold(ec echo.Context) error {
	var body struct {
		cbdash.HoldRequest
		TTL json.RawMessage `json:"ttl"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(ec.Response(), ec.Request().Body, 64<<10))
	if err := dec.Decode(&body); err != nil {
		return invalidf("hold request: %s", jsonReason(err))
	}
	req := body.HoldRequest
	ttl, err := parseTTL(body.TTL)
	if err != nil {
		return err
	}
	req.TTL = ttl
	if actor, ok := ec.Get(ActorKey).(string); ok && actor != "" {
		req.Actor = actor
	}
	if ec.QueryParam("dry_run") == "1" {
		p, err := c.PlanHold(req)
		if err != nil {
			return err
		}
		return ec.JSON(http.StatusOK, p)
	}
	h, err := c.CreateHold(ec.Request().Context(), req)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusCreated, h)
}

func (c *Collector) postHoldRelease(ec echo.Context) error {
	var body struct {
		Reason string `json:"reason"`
		Actor  string `json:"actor"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(ec.Response(), ec.Request().Body, 16<<10))
	if err := dec.Decode(&body); err != nil {
		return invalidf("release request: %s", jsonReason(err))
	}
	if actor, ok := ec.Get(ActorKey).(string); ok && actor != "" {
		body.Actor = actor
	}
	h, err := c.ReleaseHold(ec.Request().Context(), ec.Param("id"), body.Actor, body.Reason)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, h)
}
