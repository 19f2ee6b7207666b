package web

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
)

// ScheduleService is what the drill schedule endpoints and the holds
// page's schedule list need. *collector.Collector implements it; when
// Config.Holds does not, the endpoints answer 404 and the page lists no
// schedules. Its methods must be safe for concurrent use.
type ScheduleService interface {
	// Schedules lists schedules newest first with their next run and last
	// runs; deleted ones too when deleted is set.
	Schedules(ctx context.Context, deleted bool) ([]cbdash.DrillSchedule, error)
	// Schedule returns one; cbdash.ErrNotFound for an unknown id.
	Schedule(ctx context.Context, id string) (cbdash.DrillSchedule, error)
	// CreateSchedule and DeleteSchedule record actor in the audit log.
	CreateSchedule(ctx context.Context, actor cbdash.Actor, req cbdash.ScheduleRequest) (cbdash.DrillSchedule, error)
	DeleteSchedule(ctx context.Context, actor cbdash.Actor, id, reason string) (cbdash.DrillSchedule, error)
}

// mountSchedulesAPI registers the drill schedule endpoints:
//
//	GET    /api/v1/schedules          ?deleted=true: deleted ones too
//	GET    /api/v1/schedules/:id      one, with its last runs and next run
//	POST   /api/v1/schedules          create
//	DELETE /api/v1/schedules/:id      ?reason=...: it runs no more (kept, with who and why)
func (s *Server) mountSchedulesAPI(read, op routes) {
	read.GET("/api/v1/schedules", s.apiSchedules)
	read.GET("/api/v1/schedules/:id", s.apiSchedule)
	op.POST("/api/v1/schedules", s.apiCreateSchedule)
	op.DELETE("/api/v1/schedules/:id", s.apiDeleteSchedule)
}

func (s *Server) scheduleService() (ScheduleService, error) {
	if s.cfg.Schedules != nil {
		return s.cfg.Schedules, nil
	}
	return nil, errorf(cbdash.ErrNotFound, "drill schedules are not kept by this server")
}

func (s *Server) apiSchedules(c echo.Context) error {
	ss, err := s.scheduleService()
	if err != nil {
		return err
	}
	list, err := ss.Schedules(c.Request().Context(), c.QueryParam("deleted") == "true")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

func (s *Server) apiSchedule(c echo.Context) error {
	ss, err := s.scheduleService()
	if err != nil {
		return err
	}
	d, err := ss.Schedule(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// apiCreateSchedule creates a schedule from a JSON cbdash.ScheduleRequest
// (a hold request with a rule; ttl in nanoseconds or a Go duration
// string) as the caller, and answers 201 with the cbdash.DrillSchedule.
func (s *Server) apiCreateSchedule(c echo.Context) error {
	ss, err := s.scheduleService()
	if err != nil {
		return err
	}
	var body struct {
		cbdash.ScheduleRequest
		TTL ttlField `json:"ttl"`
	}
	if err := decodeBody(c, "schedule request", &body); err != nil {
		return err
	}
	req := body.ScheduleRequest
	if req.TTL, err = body.TTL.duration(); err != nil {
		return err
	}
	d, err := ss.CreateSchedule(c.Request().Context(), actorFrom(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, d)
}

// apiDeleteSchedule deletes a schedule as the caller, for ?reason=, and
// answers 200 with it as deleted.
func (s *Server) apiDeleteSchedule(c echo.Context) error {
	ss, err := s.scheduleService()
	if err != nil {
		return err
	}
	d, err := ss.DeleteSchedule(c.Request().Context(), actorFrom(c), c.Param("id"), c.QueryParam("reason"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}
