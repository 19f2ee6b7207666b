package web

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
)

// Member pages of GET /api/v1/breakers/:service/:breaker: a page asked
// for by cursor or offset without a limit has DefaultMemberPage members;
// no page is larger than MaxMemberPage, but for the whole list answered
// when none of limit, cursor and offset is given.
const (
	DefaultMemberPage = 100
	MaxMemberPage     = 1000
)

func (s *Server) mountBreakersAPI(read, op routes) {
	read.GET("/api/v1/services", s.apiServices)
	read.GET("/api/v1/dependencies", s.apiDependencies)
	read.GET("/api/v1/breakers", s.apiBreakers)
	read.GET("/api/v1/breakers/:service/:breaker", s.apiBreaker)
	read.GET("/api/v1/breakers/:service/:breaker/history", s.apiHistory)
	read.GET("/api/v1/breakers/:service/:breaker/gaps", s.apiGaps)
	read.GET("/api/v1/transitions", s.apiTransitions)
	read.GET("/api/v1/commands", s.apiCommands)
	read.GET("/api/v1/commands/:id", s.apiCommand)
	op.POST("/api/v1/commands", s.apiIssue)
}

func (s *Server) apiServices(c echo.Context) error {
	return c.JSON(http.StatusOK, s.col.Services())
}

// dependencySummary is a dependency without its members: its per_instance
// is left out (the dependency's own endpoint pages them).
type dependencySummary struct {
	cbdash.Dependency
	PerInstance []*cbdash.InstanceBreaker `json:"per_instance,omitempty"`
}

// dependencies answers the live dependencies, of one service when
// ?service= names one, in the order ?sort= names (cbdash.Orders, as the
// overview sorts; worst first without it). An unknown order is an error
// wrapping cbdash.ErrInvalid. With members, each lists every member in
// PerInstance, those another collector serves included (read from the
// store, Collector.DependenciesWithMembers).
func (s *Server) dependencies(c echo.Context, members bool) ([]cbdash.Dependency, error) {
	order, err := cbdash.ParseOrder(c.QueryParam("sort"))
	if err != nil {
		return nil, err
	}
	var deps []cbdash.Dependency // worst first
	if members {
		deps = s.col.DependenciesWithMembers()
	} else {
		deps = s.col.Dependencies()
	}
	if svc := c.QueryParam("service"); svc != "" {
		deps = slices.DeleteFunc(deps, func(d cbdash.Dependency) bool { return d.Service != svc })
	}
	if order != cbdash.OrderWorst {
		cbdash.SortDependencies(deps, order)
	}
	return deps, nil
}

// apiDependencies lists dependency summaries, worst first (or as ?sort=
// asks), optionally of one service (?service=): a dependency without its members (about 1 KB
// each, 21 KB at 1,000 instances x 20 breakers). One shape, whatever the
// query (API 1.1.0; the summaries GET /api/v1/breakers answered from
// issue 15 until then).
func (s *Server) apiDependencies(c echo.Context) error {
	deps, err := s.dependencies(c, false)
	if err != nil {
		return err
	}
	out := make([]dependencySummary, len(deps))
	for i, d := range deps {
		d.PerInstance = nil
		out[i] = dependencySummary{Dependency: wording.Worded(d)}
	}
	return c.JSON(http.StatusOK, out)
}

// apiBreakers lists dependencies, worst first (or as ?sort= asks),
// optionally of one service (?service=), each with every member in per_instance: what /api/v1
// answered before issue 15 made it summaries (as API 1.0.0 documented
// it), restored in API 1.1.0 so that those clients read what they were
// written for. Large:
// about 1 KB per instance and breaker. Deprecated (RFC 9745 headers), its
// successor GET /api/v1/dependencies; it stays for the whole of /api/v1.
// ?members= (all or none, issue 15's switch) is still accepted and changes
// nothing; another value is 400.
func (s *Server) apiBreakers(c echo.Context) error {
	switch c.QueryParam("members") {
	case "", "all", "none":
	default:
		return errorf(cbdash.ErrInvalid, "members must be all or none")
	}
	deps, err := s.dependencies(c, true)
	if err != nil {
		return err
	}
	for i := range deps {
		deps[i] = wording.Worded(deps[i])
		if deps[i].PerInstance == nil {
			deps[i].PerInstance = []*cbdash.InstanceBreaker{} // [], never null: every element carries its members
		}
	}
	deprecated(c, "/api/v1/dependencies")
	return c.JSON(http.StatusOK, deps)
}

// dependencyPage is one dependency with one page of its members, the odd
// ones first (memberCompare).
type dependencyPage struct {
	cbdash.Dependency
	// Members is how many members the dependency has in all.
	Members int `json:"members"`
	// Next is the cursor of the next page (?cursor=), "" after the last.
	Next string `json:"next,omitempty"`
}

// apiBreaker answers one dependency with a page of its members:
// ?limit= (at most MaxMemberPage), from ?cursor= (the previous page's
// next) or ?offset=. Without any of the three it answers every member in
// one page, as /api/v1 did before its members were paged (issue 15); with
// a cursor or an offset but no limit, DefaultMemberPage members.
func (s *Server) apiBreaker(c echo.Context) error {
	k, err := depKey(c)
	if err != nil {
		return err
	}
	d, err := s.col.Dependency(k)
	if err != nil {
		return err
	}
	n, err := limitParam(c.QueryParam, MaxMemberPage)
	if err != nil {
		return err
	}
	members := slices.Clone(d.PerInstance)
	switch {
	case n > 0:
	case c.QueryParam("cursor") == "" && c.QueryParam("offset") == "":
		n = max(len(members), 1)
	default:
		n = DefaultMemberPage
	}
	slices.SortFunc(members, memberCompare)
	start := 0
	switch cur, off := c.QueryParam("cursor"), c.QueryParam("offset"); {
	case cur != "" && off != "":
		return errorf(cbdash.ErrInvalid, "give cursor or offset, not both")
	case cur != "":
		rank, inst, err := parseCursor(cur)
		if err != nil {
			return err
		}
		start, _ = slices.BinarySearchFunc(members, cursorKey{rank, inst}, func(m *cbdash.InstanceBreaker, k cursorKey) int {
			if r := memberRank(m.State); r != k.rank {
				return r - k.rank
			}
			return strings.Compare(m.Instance, k.instance)
		})
		if start < len(members) && memberRank(members[start].State) == rank && members[start].Instance == inst {
			start++ // the cursor is the last member of the previous page
		}
	case off != "":
		if start, err = strconv.Atoi(off); err != nil || start < 0 {
			return errorf(cbdash.ErrInvalid, "offset must be a number of members, 0 or more")
		}
		start = min(start, len(members))
	}
	end := min(start+n, len(members))
	page := dependencyPage{Dependency: d, Members: len(members)}
	page.PerInstance = append([]*cbdash.InstanceBreaker{}, members[start:end]...)
	if end < len(members) {
		last := members[end-1]
		page.Next = cursorOf(memberRank(last.State), last.Instance)
	}
	page.Dependency = wording.Worded(page.Dependency)
	return c.JSON(http.StatusOK, page)
}

// memberRank orders members' states, the odd ones first: open,
// half-open, forced open, forced closed, then closed (cbdash.StateRank).
func memberRank(state string) int { return cbdash.StateRank(state) }

func memberCompare(a, b *cbdash.InstanceBreaker) int {
	if r := memberRank(a.State) - memberRank(b.State); r != 0 {
		return r
	}
	return strings.Compare(a.Instance, b.Instance)
}

type cursorKey struct {
	rank     int
	instance string
}

// cursorOf is the opaque cursor after a member: its rank and instance.
func cursorOf(rank int, instance string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(rank) + ":" + instance))
}

func parseCursor(cur string) (int, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cur)
	if err == nil {
		if r, inst, ok := strings.Cut(string(b), ":"); ok {
			if rank, err := strconv.Atoi(r); err == nil {
				return rank, inst, nil
			}
		}
	}
	return 0, "", errorf(cbdash.ErrInvalid, "cursor is not one this server gave (use the next of the previous page)")
}

// historyQuery reads a dependency's ?from=&to= (default the last hour).
func (s *Server) historyQuery(c echo.Context) (cbdash.HistoryQuery, error) {
	k, err := depKey(c)
	if err != nil {
		return cbdash.HistoryQuery{}, err
	}
	q := cbdash.HistoryQuery{DependencyKey: k}
	q.From, q.To, err = timeRange(c.QueryParam, s.now(), time.Hour)
	return q, err
}

// apiHistory serves ?from=&to=, ?resolution=second|minute|hour and
// ?instance=.
func (s *Server) apiHistory(c echo.Context) error {
	q, err := s.historyQuery(c)
	if err != nil {
		return err
	}
	q.Instance = c.QueryParam("instance")
	switch r := cbdash.Resolution(c.QueryParam("resolution")); r {
	case "", cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour:
		q.Resolution = r
	default:
		return errorf(cbdash.ErrInvalid, "resolution %q is not second, minute or hour", truncate(string(r), 20))
	}
	pts, err := s.col.History(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pts)
}

// apiGaps serves the gaps of a dependency's history, ?from=&to= as for
// history.
func (s *Server) apiGaps(c echo.Context) error {
	q, err := s.historyQuery(c)
	if err != nil {
		return err
	}
	gaps, err := s.col.Gaps(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, gaps)
}

func (s *Server) apiTransitions(c echo.Context) error {
	q := cbdash.TransitionQuery{Service: c.QueryParam("service"), Breaker: c.QueryParam("breaker"), Instance: c.QueryParam("instance")}
	var err error
	if c.QueryParam("from") != "" || c.QueryParam("to") != "" {
		if q.From, q.To, err = timeRange(c.QueryParam, s.now(), 24*time.Hour); err != nil {
			return err
		}
	}
	if q.Limit, err = limitParam(c.QueryParam, 10000); err != nil {
		return err
	}
	var ts []cbdash.TransitionRecord
	switch shadow := c.QueryParam("shadow"); shadow {
	case "", "false":
		ts, err = s.history.Transitions(c.Request().Context(), q)
	case "true": // the shadow configurations' would-be transitions, never the live ones
		ts, err = s.shadowTransitions(c.Request().Context(), q)
		if ts == nil && err == nil {
			ts = []cbdash.TransitionRecord{}
		}
	default:
		return errorf(cbdash.ErrInvalid, "shadow must be true or false (got %q)", shadow)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ts)
}

func (s *Server) apiCommands(c echo.Context) error {
	q := cbdash.CommandQuery{Service: c.QueryParam("service"), Breaker: c.QueryParam("breaker")}
	var err error
	if q.Limit, err = limitParam(c.QueryParam, 10000); err != nil {
		return err
	}
	cmds, err := s.history.Commands(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cmds)
}

func (s *Server) apiCommand(c echo.Context) error {
	cmd, err := s.history.Command(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cmd)
}

// apiIssue issues a command from a JSON cbdash.CommandRequest (ttl in
// nanoseconds, or a Go duration string such as "10m") as the caller; the
// body's actor is ignored.
func (s *Server) apiIssue(c echo.Context) error {
	var body struct {
		cbdash.CommandRequest
		TTL ttlField `json:"ttl"`
	}
	if err := decodeBody(c, "command request", &body); err != nil {
		return err
	}
	req := body.CommandRequest
	var err error
	if req.TTL, err = body.TTL.duration(); err != nil {
		return err
	}
	cmd, err := s.col.Issue(c.Request().Context(), actorFrom(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, cmd)
}
