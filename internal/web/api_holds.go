package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
)

// mountHoldsAPI registers the hold endpoints:
//
//	GET  /api/v1/holds                 ?live=1: only live holds; ?limit=
//	GET  /api/v1/holds/:id             one hold with its coverage
//	GET  /api/v1/holds/:id/report      drill report; ?format=md: Markdown
//	POST /api/v1/holds                 create (?dry_run=1: the blast radius only)
//	POST /api/v1/holds/:id/release     {"reason": "..."}
func (s *Server) mountHoldsAPI(read, op routes) {
	read.GET("/api/v1/holds", s.apiHolds)
	read.GET("/api/v1/holds/:id", s.apiHold)
	read.GET("/api/v1/holds/:id/report", s.apiHoldReport)
	op.POST("/api/v1/holds", s.apiCreateHold)
	op.POST("/api/v1/holds/:id/release", s.apiReleaseHold)
}

func (s *Server) apiHolds(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	n, err := limitParam(c.QueryParam, 5000)
	if err != nil {
		return err
	}
	list, err := hs.Holds(c.Request().Context(), c.QueryParam("live") == "1", n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

func (s *Server) apiHold(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	h, err := hs.Hold(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h)
}

func (s *Server) apiHoldReport(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	r, err := hs.HoldReport(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	if c.QueryParam("format") == "md" {
		return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", collector.HoldReportMarkdown(r))
	}
	return c.JSON(http.StatusOK, r)
}

// apiCreateHold creates a hold from a JSON cbdash.HoldRequest (ttl in
// nanoseconds, or a Go duration string such as "10m") as the caller (the
// body's actor is ignored); with ?dry_run=1 it answers the
// cbdash.HoldPlan instead and changes nothing.
func (s *Server) apiCreateHold(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	var body struct {
		cbdash.HoldRequest
		TTL ttlField `json:"ttl"`
	}
	if err := decodeBody(c, "hold request", &body); err != nil {
		return err
	}
	req := body.HoldRequest
	if req.TTL, err = body.TTL.duration(); err != nil {
		return err
	}
	actor := actorFrom(c)
	if c.QueryParam("dry_run") == "1" {
		req.Actor = actor.Name
		p, err := hs.PlanHold(req)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, p)
	}
	h, err := hs.CreateHold(c.Request().Context(), actor, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h)
}

func (s *Server) apiReleaseHold(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeBody(c, "release request", &body); err != nil {
		return err
	}
	h, err := hs.ReleaseHold(c.Request().Context(), actorFrom(c), c.Param("id"), body.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h)
}
