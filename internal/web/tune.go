package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Replays (issue 31) run beside the dashboard, never on the ingest path:
// tuneSlots at a time, each within tuneBudget; a request that finds every
// slot taken waits while the client does, then gets 503.
const (
	tuneSlots  = 2
	tuneBudget = 30 * time.Second
)

// newTuner makes the server's replay service, reading history and live
// settings through col.
func newTuner(col Collector) *tune.Service {
	live := func(k cbdash.DependencyKey) (protocol.BreakerConfig, error) { return tune.LiveFrom(col.Dependency(k)) }
	return tune.NewService(col, live, tuneSlots, tuneBudget)
}

func (s *Server) mountTuneAPI(read routes) {
	read.GET("/api/v1/breakers/:service/:breaker/replay", s.apiReplay)
}

// apiReplay serves GET /api/v1/breakers/{service}/{breaker}/replay
// ?from=&to= (RFC 3339 or Unix ms; default the last hour, at most 24 h)
// &candidate=SPEC (repeatable, tune.ParseCandidate's form)
// &grid=SPEC (a sweep, tune.Grid's form): a tune.Report.
func (s *Server) apiReplay(c echo.Context) error {
	rep, err := s.replay(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// replay runs the replay a request asks for (see apiReplay), its errors
// in the API's terms: 400 for a bad range or candidate, 404 for an
// unknown dependency, 503 when busy or over budget.
func (s *Server) replay(c echo.Context) (tune.Report, error) {
	q, err := s.historyQuery(c)
	if err != nil {
		return tune.Report{}, err
	}
	r := tune.Request{DependencyKey: q.DependencyKey, From: q.From, To: q.To, Candidates: c.QueryParams()["candidate"]}
	var rep tune.Report
	if grid := c.QueryParam("grid"); grid != "" {
		rep, err = s.tuner.Sweep(c.Request().Context(), r, grid, nil)
	} else {
		rep, err = s.tuner.Replay(c.Request().Context(), r)
	}
	return rep, tuneError(err)
}

func tuneError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tune.ErrBadCandidate), errors.Is(err, tune.ErrRange):
		return errorf(cbdash.ErrInvalid, "%v", err)
	case errors.Is(err, tune.ErrBusy), errors.Is(err, tune.ErrBudget), errors.Is(err, context.DeadlineExceeded):
		return errorf(cbdash.ErrUnavailable, "%v", err)
	}
	return err
}
