package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
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
	read.GET("/api/v1/breakers/:service/:breaker/review", s.apiReview)
	read.GET("/api/v1/review", s.apiReviewAll)
}

// apiReview serves GET /api/v1/breakers/{service}/{breaker}/review: a
// tune.BreakerReview of the last 24 h; 404 for an unknown dependency.
func (s *Server) apiReview(c echo.Context) error {
	k, err := depKey(c)
	if err != nil {
		return err
	}
	r, err := s.review.Review(c.Request().Context(), k)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// apiReviewAll serves GET /api/v1/review: every live dependency's
// review, worst first.
func (s *Server) apiReviewAll(c echo.Context) error {
	rs, err := s.review.ReviewAll(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rs)
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
	if err == nil {
		s.countShadowTrips(c.Request().Context(), &rep)
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

// tunePanel is the dependency page's Tune panel: the form, filled with
// the page's range (at most the last 24 h of it) or what was submitted,
// and, when submitted (?tune=1), the replay's table, or why it failed.
func (s *Server) tunePanel(c echo.Context, k cbdash.DependencyKey, from, to time.Time) *templates.TunePanel {
	q := c.QueryParams()
	from = maxTime(from, to.Add(-tune.MaxRange))
	p := &templates.TunePanel{Action: "/dependency", From: orDefault(q.Get("tune_from"), from), To: orDefault(q.Get("tune_to"), to),
		Candidate: q.Get("candidate"), Keys: tune.CandidateKeys}
	if p.Candidate == "" {
		p.Candidate = "failure-rate=40"
	}
	for name, vs := range q {
		if !slices.Contains([]string{"tune", "tune_from", "tune_to", "candidate", "review"}, name) && len(vs) > 0 {
			p.Hidden = append(p.Hidden, templates.Option{Text: name, Value: vs[0]})
		}
	}
	slices.SortFunc(p.Hidden, func(a, b templates.Option) int { return strings.Compare(a.Text, b.Text) })
	if q.Get("tune") != "" {
		s.runPanel(c, k, p)
	}
	s.reviewPanel(c, k, p)
	return p
}

// reviewPanel fills p's review when the page asks for it (?review=1),
// else the link that asks.
func (s *Server) reviewPanel(c echo.Context, k cbdash.DependencyKey, p *templates.TunePanel) {
	q := c.QueryParams()
	if q.Get("review") == "" {
		ask := url.Values{}
		for name, vs := range q {
			ask[name] = vs
		}
		ask.Set("review", "1")
		p.ReviewHref = "/dependency?" + ask.Encode() + "#review"
		return
	}
	r, err := s.review.Review(c.Request().Context(), k)
	if err != nil {
		p.ReviewError = userMessage(err)
		return
	}
	p.Review = []templates.ReviewLine{}
	for _, a := range r.Answers {
		p.Review = append(p.Review, templates.ReviewLine{Key: a.Key, Question: a.Question, Verdict: a.Verdict, Evidence: a.Evidence, Change: a.Change, Link: a.Link})
	}
}

func orDefault(v string, t time.Time) string {
	if v != "" {
		return v
	}
	return t.UTC().Format(time.RFC3339)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runPanel runs the replay p's form asks for and fills p's table or
// error.
func (s *Server) runPanel(c echo.Context, k cbdash.DependencyKey, p *templates.TunePanel) {
	from, to, err := timeRange(url.Values{"from": {p.From}, "to": {p.To}}.Get, s.now(), time.Hour)
	if err != nil {
		p.Error = userMessage(err)
		return
	}
	r := tune.Request{DependencyKey: k, From: from, To: to}
	if strings.TrimSpace(p.Candidate) != "" {
		r.Candidates = []string{strings.TrimSpace(p.Candidate)}
	}
	rep, err := s.tuner.Replay(c.Request().Context(), r)
	if err != nil {
		p.Error = userMessage(tuneError(err))
		return
	}
	s.countShadowTrips(c.Request().Context(), &rep)
	p.Table = tuneTable(rep)
	p.Table.Recorded = s.recordedLane(c, k, rep)
}

// recordedLane is the stretches of rep's range when any instance of k
// was out of closed, from the stored transitions (none if they cannot be
// read: the lane is then empty).
func (s *Server) recordedLane(c echo.Context, k cbdash.DependencyKey, rep tune.Report) []templates.LaneSeg {
	trs, err := s.history.Transitions(c.Request().Context(), cbdash.TransitionQuery{Service: k.Service, Breaker: k.Breaker, From: rep.From, To: rep.To, Limit: 10000})
	if err != nil {
		return nil
	}
	return outOfClosed(trs, rep.To, func(state string, a, b time.Time) templates.LaneSeg { return laneSeg(rep, state, a, b) })
}

// tuneTable turns a report into the panel's table and lanes.
func tuneTable(rep tune.Report) *templates.TuneTable {
	t := &templates.TuneTable{Notes: rep.Notes,
		Summary: fmt.Sprintf("%d s replayed as one of %.1f instances, normal failure rate %.1f%% (lower quartile over 10 s, rejected calls counted at the probes' failure rate), %d failing episodes, %d estimated spans",
			rep.Seconds, rep.Instances, rep.NormalRate, len(rep.Episodes), len(rep.Estimated))}
	for _, sp := range rep.Estimated {
		t.Estimated = append(t.Estimated, laneSeg(rep, "estimated", sp.From, sp.To))
	}
	for _, r := range rep.Runs {
		t.Rows = append(t.Rows, tuneRow(rep, r))
	}
	return t
}

func tuneRow(rep tune.Report, r tune.Run) templates.TuneRow {
	row := templates.TuneRow{Label: r.Label, Settings: tune.Describe(r.Settings), Err: r.Err,
		Trips: strconv.Itoa(r.Trips), Open: (time.Duration(r.OpenSeconds) * time.Second).String(),
		Rejected: strconv.FormatInt(r.Rejected, 10), IntoFailing: strconv.FormatInt(r.IntoFailing, 10),
		Detect: "-", Flaps: strconv.Itoa(r.Flaps), FalseTrips: strconv.Itoa(r.FalseTrips)}
	if r.DetectSeconds >= 0 {
		row.Detect = fmt.Sprintf("%.1fs", r.DetectSeconds)
	}
	if r.RecordedTrips != nil {
		row.Trips += " (recorded " + strconv.Itoa(*r.RecordedTrips) + ")"
	}
	row.Shadow = r.Shadow != ""
	var since time.Time
	state := ""
	for _, tr := range r.Transitions {
		if tr.From == protocol.StateClosed && tr.To == protocol.StateOpen && row.FirstTrip == "" {
			row.FirstTrip = tr.At.UTC().Format(time.RFC3339Nano)
		}
		if state != "" {
			row.Lane = append(row.Lane, laneSeg(rep, state, since, tr.At))
		}
		since, state = tr.At, tr.To
		if state == protocol.StateClosed {
			state = ""
		}
	}
	if state != "" {
		row.Lane = append(row.Lane, laneSeg(rep, state, since, rep.To))
	}
	return row
}

// laneSeg places [from, to) on the report's range.
func laneSeg(rep tune.Report, state string, from, to time.Time) templates.LaneSeg {
	span := rep.To.Sub(rep.From).Seconds()
	at := func(d time.Duration) string { return strconv.FormatFloat(1000*d.Seconds()/span, 'f', 2, 64) }
	return templates.LaneSeg{State: state, X: at(from.Sub(rep.From)), W: at(max(to.Sub(from), 0)),
		Title: fmt.Sprintf("%s %s to %s", state, from.UTC().Format("15:04:05"), to.UTC().Format("15:04:05"))}
}
