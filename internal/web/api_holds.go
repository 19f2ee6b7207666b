package web

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
)

// mountHoldsAPI registers the hold endpoints:
//
//	GET  /api/v1/holds                 ?live=1: only live holds; ?limit=
//	GET  /api/v1/holds/:id             one hold with its coverage
//	GET  /api/v1/holds/:id/report      drill report (JSON; ?format=md: deprecated, as report.md)
//	GET  /api/v1/holds/:id/report.md   drill report as Markdown
//	POST /api/v1/holds                 create (?dry_run=1: deprecated, as plan)
//	POST /api/v1/holds/plan            the blast radius only: what a hold would cover now
//	POST /api/v1/holds/:id/release     {"reason": "..."}
func (s *Server) mountHoldsAPI(read, op routes) {
	read.GET("/api/v1/holds", s.apiHolds)
	read.GET("/api/v1/holds/:id", s.apiHold)
	read.GET("/api/v1/holds/:id/report", s.apiHoldReport)
	read.GET("/api/v1/holds/:id/report.md", s.apiHoldReportMarkdown)
	op.POST("/api/v1/holds", s.apiCreateHold)
	op.POST("/api/v1/holds/plan", s.apiPlanHold)
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

// apiHoldReport answers a hold's drill report as JSON; ?format=md, the
// deprecated form of GET .../report.md, as Markdown.
func (s *Server) apiHoldReport(c echo.Context) error {
	if c.QueryParam("format") == "md" {
		deprecated(c, "/api/v1/holds/"+url.PathEscape(c.Param("id"))+"/report.md")
		return s.apiHoldReportMarkdown(c)
	}
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	r, err := hs.HoldReport(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// apiHoldReportMarkdown answers a hold's drill report as Markdown.
func (s *Server) apiHoldReportMarkdown(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	r, err := hs.HoldReport(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", collector.HoldReportMarkdown(r))
}

// holdRequest reads a JSON cbdash.HoldRequest (ttl in nanoseconds, or a
// Go duration string such as "10m"); its actor is ignored (the caller's
// is used).
func holdRequest(c echo.Context) (cbdash.HoldRequest, error) {
	var body struct {
		cbdash.HoldRequest
		TTL ttlField `json:"ttl"`
	}
	if err := decodeBody(c, "hold request", &body); err != nil {
		return cbdash.HoldRequest{}, err
	}
	req := body.HoldRequest
	var err error
	req.TTL, err = body.TTL.duration()
	return req, err
}

// apiCreateHold creates a hold from a hold request as the caller and
// answers 201 with the cbdash.HoldRecord; with ?dry_run=1, the deprecated
// form of POST /api/v1/holds/plan, it answers 200 with the plan instead
// and changes nothing.
func (s *Server) apiCreateHold(c echo.Context) error {
	if c.QueryParam("dry_run") == "1" {
		deprecated(c, "/api/v1/holds/plan")
		return s.apiPlanHold(c)
	}
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	req, err := holdRequest(c)
	if err != nil {
		return err
	}
	h, err := hs.CreateHold(c.Request().Context(), actorFrom(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h)
}

// apiPlanHold answers 200 with the cbdash.HoldPlan of a hold request
// (what it would cover now, as the caller) and changes nothing. The
// request is refused as POST /api/v1/holds would refuse it.
func (s *Server) apiPlanHold(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	req, err := holdRequest(c)
	if err != nil {
		return err
	}
	req.Actor = actorFrom(c).Name
	p, err := hs.PlanHold(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
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
