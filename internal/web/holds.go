package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// HoldService is what the hold pages need: holds as stored desired state,
// their drill reports, the blast radius of a hold before it is created,
// and creating and releasing holds. *collector.Collector implements it;
// it is Config.Holds, and without it the hold pages and the holds API
// answer 404. Its methods must be safe for concurrent use.
type HoldService interface {
	// Holds returns the live holds (live true) or every hold, newest
	// first, with their coverage; limit 0 = 200.
	Holds(ctx context.Context, live bool, limit int) ([]cbdash.HoldRecord, error)
	// HoldReport returns the drill report of a hold; cbdash.ErrNotFound
	// for an unknown id.
	HoldReport(ctx context.Context, id string) (cbdash.HoldReport, error)
	// PlanHold is the dry run: what req would cover now. Errors wrap
	// cbdash.ErrInvalid and name the field or the limit.
	PlanHold(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldPlan, error)
	// Hold returns one hold with its coverage; cbdash.ErrNotFound for an
	// unknown id.
	Hold(ctx context.Context, id string) (cbdash.HoldRecord, error)
	// CreateHold and ReleaseHold record actor in the audit log.
	CreateHold(ctx context.Context, actor cbdash.Actor, req cbdash.HoldRequest) (cbdash.HoldRecord, error)
	ReleaseHold(ctx context.Context, actor cbdash.Actor, id, reason string) (cbdash.HoldRecord, error)
	// MaxHold is the longest hold accepted.
	MaxHold() time.Duration
	// DefaultStops is the stop conditions every hold gets unless it
	// drops them.
	DefaultStops() []cbdash.StopCondition
}

// mountHolds registers the hold pages: read for the list and the drill
// reports, op for the fleet-wide hold (confirm, create) and release.
func (s *Server) mountHolds(read, op routes) {
	read.GET("/holds", s.holdsPage)
	read.GET("/holds/:id", s.holdPage)
	op.POST("/holds/confirm", s.holdConfirm)
	op.POST("/holds", s.holdCreate)
	op.POST("/holds/schedule", s.scheduleCreate) // drillform.go
	op.POST("/holds/:id/release", s.holdRelease)
}

// maxHold is the longest hold (and force) accepted: the hold service's
// MaxHold, cbdash.DefaultMaxHold without one.
func (s *Server) maxHold() time.Duration {
	if s.cfg.Holds == nil || s.cfg.Holds.MaxHold() <= 0 {
		return cbdash.DefaultMaxHold
	}
	return s.cfg.Holds.MaxHold()
}

// holdText is a hold's longest duration in words: "24h", "90m", "1h30m".
func holdText(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (s *Server) holdService() (HoldService, error) {
	if s.cfg.Holds == nil {
		return nil, errorf(cbdash.ErrNotFound, "holds are not kept by this server")
	}
	return s.cfg.Holds, nil
}

func holdHref(id string) string { return "/holds/" + id }

// holdsPage lists holds newest first; ?fragment=1 answers only the table,
// which the page polls.
func (s *Server) holdsPage(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	list, err := hs.Holds(c.Request().Context(), false, 200)
	if err != nil {
		return err
	}
	now := s.now()
	rows := make([]templates.HoldRow, 0, len(list))
	for _, h := range list {
		rows = append(rows, holdRow(h, now))
	}
	const fragment = "/holds?fragment=1"
	if c.QueryParam("fragment") != "" {
		return render(c, http.StatusOK, templates.HoldList(rows, fragment))
	}
	schedules, err := s.scheduleRows(c.Request().Context())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, templates.HoldsPage(templates.Holds{
		Page: s.page(c, "Holds", "holds"), Rows: rows, Fragment: fragment, MaxHold: holdText(hs.MaxHold()), Schedules: schedules,
	}))
}

// scheduleRows is the drill schedules for the holds page; nil when the
// hold service keeps none.
func (s *Server) scheduleRows(ctx context.Context) ([]templates.ScheduleRow, error) {
	ss := s.cfg.Schedules
	if ss == nil {
		return nil, nil
	}
	ds, err := ss.Schedules(ctx, false)
	if err != nil {
		return nil, err
	}
	rows := make([]templates.ScheduleRow, 0, len(ds))
	for _, d := range ds {
		r := templates.ScheduleRow{ID: d.ID, Selector: d.Selector.String(), Rule: d.Rule.String(), For: holdText(d.TTL),
			Stops: stopText(d.StopIf), NextRun: "none", LastRun: "never", Actor: d.Actor, Reason: d.Reason}
		if !d.NextRun.IsZero() {
			r.NextRun = d.NextRun.UTC().Format("Mon 2006-01-02 15:04")
		}
		if len(d.Runs) > 0 {
			run := d.Runs[0]
			r.LastRun = run.Text()
			if run.Result == cbdash.RunStarted {
				r.LastHref = holdHref(run.HoldID)
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// stopText is stop conditions as the CLI writes them, comma-separated.
func stopText(cs []cbdash.StopCondition) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}

// holdStatus is a hold's status at now: live, released or expired.
func holdStatus(h cbdash.HoldRecord, now time.Time) templates.State {
	switch {
	case h.LiveAt(now) && h.Action == protocol.ActionForceClosed:
		return templates.State{Class: "forced-closed", Text: "live"}
	case h.LiveAt(now):
		return templates.State{Class: "forced-open", Text: "live"}
	case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
		return templates.State{Class: "none", Text: "released"}
	case now.Before(h.CreatedAt):
		return templates.State{Class: "none", Text: "scheduled"}
	}
	return templates.State{Class: "none", Text: "expired"}
}

// holdExpiry is a hold's one end to the second (HoldRecord.End: its
// release when released, its expiry otherwise), with what remains or
// how it ended.
func holdExpiry(h cbdash.HoldRecord, now time.Time) string {
	s := stamp(h.End())
	switch {
	case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
		return s + " (released by " + h.ReleasedBy + ")"
	case now.Before(h.Until):
		return s + " (in " + exactDuration(h.Until.Sub(now).Truncate(time.Second)) + ")"
	}
	return s + " (expired)"
}

// coverageText says how many instance breakers a hold was applied to,
// how many joined later, and what they answered: "3 instances (1 joined
// later): 2 applied, 1 pending". A restart under the same id counts once,
// with its latest answer.
func coverageText(cs []cbdash.HoldCoverage) string {
	if len(cs) == 0 {
		return "no instance reached yet"
	}
	type key struct{ svc, inst, br string }
	latest := map[key]cbdash.HoldCoverage{}
	late := map[key]bool{}
	for _, cv := range cs {
		k := key{cv.Service, cv.Instance, cv.Breaker}
		if prev, ok := latest[k]; !ok || cv.StartedAt >= prev.StartedAt {
			latest[k] = cv
		}
		late[k] = late[k] || cv.JoinedLate
	}
	counts := map[string]int{}
	nLate := 0
	for k, cv := range latest {
		counts[cv.Status]++
		if late[k] {
			nLate++
		}
	}
	var parts []string
	for _, st := range []string{cbdash.TargetApplied, cbdash.TargetPending, cbdash.TargetFailed, cbdash.TargetExpired} {
		if counts[st] > 0 {
			parts = append(parts, strconv.Itoa(counts[st])+" "+st)
		}
	}
	n := plural(len(latest), "instance breaker", "instance breakers")
	if nLate > 0 {
		n += " (" + strconv.Itoa(nLate) + " joined later)"
	}
	return n + ": " + strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func holdRow(h cbdash.HoldRecord, now time.Time) templates.HoldRow {
	r := templates.HoldRow{
		ID: h.ID, Href: holdHref(h.ID), Action: incident.ActionText(h.Action), Selector: h.Selector.String(),
		Actor: h.Actor, Reason: h.Reason, Start: stamp(h.CreatedAt), Expiry: holdExpiry(h, now),
		Status: holdStatus(h, now), Coverage: coverageText(h.Coverage),
	}
	if h.LiveAt(now) {
		r.Until, r.UntilISO, r.In = stamp(h.Until), isoTime(h.Until), exactDuration(h.Until.Sub(now).Truncate(time.Second))
	}
	return r
}

// depHolds is the holds block of dependency d's page: the live holds
// covering it, each with the instances it governs (cbdash.Governing: the
// most recent wins; never one whose breaker cannot be held, which no hold
// is sent to), its past holds, and the fleet-wide hold form for an
// operator. It is nil when the server keeps no holds.
func (s *Server) depHolds(ctx context.Context, d cbdash.Dependency, p templates.Page) (*templates.DepHolds, error) {
	hs, err := s.holdService()
	if err != nil {
		return nil, nil
	}
	all, err := hs.Holds(ctx, false, 500)
	if err != nil {
		return nil, err
	}
	now := s.now()
	v := &templates.DepHolds{}
	var live []cbdash.HoldRecord
	for _, h := range all {
		if h.Selector.CoversDependency(d.DependencyKey) && h.LiveAt(now) {
			live = append(live, h)
		}
	}
	for _, h := range all {
		if !h.Selector.CoversDependency(d.DependencyKey) {
			continue
		}
		row := holdRow(h, now)
		if !h.LiveAt(now) {
			if len(v.Past) < 10 {
				v.Past = append(v.Past, row)
			}
			continue
		}
		var governs []string
		for _, in := range d.PerInstance {
			if in.Config != nil && in.Config.HoldsUnsupported { // never sent a hold: it runs on its own
				continue
			}
			ref := cbdash.InstanceRef{Service: in.Service, Instance: in.Instance, Labels: in.Labels}
			if g, ok := cbdash.Governing(live, ref, d.Breaker, now); ok && g.ID == h.ID {
				governs = append(governs, in.Instance)
			}
		}
		row.Governs = "no instance (a more recent hold wins, or none matches)"
		if len(governs) > 0 {
			row.Governs = strings.Join(governs, ", ")
		}
		v.Current = append(v.Current, row)
	}
	why, partly := unsupportedText(d)
	v.Unsupported, v.Partly = why, partly
	if p.CanOp {
		v.Form = &templates.HoldForm{CSRF: p.CSRF, Service: d.Service, Breaker: d.Breaker, DefaultTTL: 15, MaxHold: holdText(s.maxHold()),
			MaxTTL: int(s.maxHold() / time.Minute), DefaultStops: stopsText(hs.DefaultStops())}
	}
	return v, nil
}

// unsupportedText says why holds are not available for d: why when no
// instance's breaker can be held (and there is at least one), partly when
// some cannot ("catalog-2 cannot be held: a sony/gobreaker v2 breaker ...").
func unsupportedText(d cbdash.Dependency) (why, partly string) {
	var no []string
	for _, in := range d.PerInstance {
		if r, ok := cbdash.HoldsUnsupported(*in.Config); ok {
			why = r
			no = append(no, in.Instance)
		}
	}
	switch {
	case len(no) == 0:
		return "", ""
	case len(no) == len(d.PerInstance):
		return why, ""
	}
	return "", strings.Join(no, ", ") + " cannot be held: " + why + "; a hold is applied to the others only."
}

// holdForm reads the fleet-wide hold form; errors wrap cbdash.ErrInvalid
// and name the field.
func holdForm(c echo.Context, actor string) (cbdash.HoldRequest, error) {
	r := cbdash.HoldRequest{Action: c.FormValue("action"), Reason: strings.TrimSpace(c.FormValue("reason")), Actor: actor,
		Selector: cbdash.Selector{Service: strings.TrimSpace(c.FormValue("service")), Breaker: c.FormValue("breaker")}}
	if r.Action != protocol.ActionForceOpen && r.Action != protocol.ActionForceClosed {
		return r, errorf(cbdash.ErrInvalid, "action: choose force open or force closed")
	}
	for _, kv := range splitList(c.FormValue("labels")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return r, errorf(cbdash.ErrInvalid, "labels: %q is not key=value", kv)
		}
		if r.Selector.Labels == nil {
			r.Selector.Labels = map[string]string{}
		}
		r.Selector.Labels[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	r.Selector.Instances = splitList(c.FormValue("instances"))
	if v := strings.TrimSpace(c.FormValue("share")); v != "" {
		share, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(share) || share < 0 || share > 100 {
			return r, errorf(cbdash.ErrInvalid, "share must be a percent within 0..100")
		}
		r.Selector.Share = share
	}
	ttl, err := strconv.Atoi(c.FormValue("ttl"))
	if err != nil || ttl < 1 {
		return r, errorf(cbdash.ErrInvalid, "ttl: an expiry of at least 1 minute is required: a hold always ends by itself")
	}
	r.TTL = time.Duration(ttl) * time.Minute
	return r, drillForm(c, &r)
}

// drillForm reads the form's drill fields (stop_if, drop_stop_if,
// drop_reason, steps) into r; errors wrap cbdash.ErrInvalid.
func drillForm(c echo.Context, r *cbdash.HoldRequest) error {
	for _, s := range splitList(c.FormValue("stop_if")) {
		sc, err := cbdash.ParseStopCondition(s)
		if err != nil {
			return err
		}
		r.StopIf = append(r.StopIf, sc)
	}
	r.DropStops, r.DropReason = splitList(c.FormValue("drop_stop_if")), strings.TrimSpace(c.FormValue("drop_reason"))
	if steps := strings.TrimSpace(c.FormValue("steps")); steps != "" {
		var err error
		if r.Steps, err = cbdash.ParseSteps(steps); err != nil {
			return err
		}
	}
	return nil
}

// stopsText writes stop conditions as the CLI takes them, comma-separated.
func stopsText(stops []cbdash.StopCondition) string {
	names := make([]string, len(stops))
	for i, c := range stops {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// holdFields are the form's fields to post again from the confirmation.
func holdFields(c echo.Context) []templates.Field {
	var out []templates.Field
	for _, n := range []string{"from", "service", "breaker", "action", "labels", "instances", "share", "ttl", "reason",
		"stop_if", "drop_stop_if", "drop_reason", "steps", "when", "at", "day", "time"} {
		out = append(out, templates.Field{Name: n, Value: c.FormValue(n)})
	}
	return out
}

// holdConfirm is the dry run of a fleet-wide hold: its blast radius, or
// the error that refuses it (a ttl over the maximum names the limit).
func (s *Server) holdConfirm(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	back := depHref(cbdash.DependencyKey{Service: c.FormValue("service"), Breaker: c.FormValue("breaker")}) + "#holds-title"
	if c.FormValue("service") == cbdash.AnyService {
		back = "/holds"
		if from := c.FormValue("from"); from != "" {
			back = depHref(cbdash.DependencyKey{Service: from, Breaker: c.FormValue("breaker")}) + "#holds-title"
		}
	}
	v := templates.HoldConfirm{Page: s.page(c, "Confirm hold", "holds"), Fields: holdFields(c), Back: back}
	req, err := holdForm(c, actorFrom(c).Name)
	v.Title = incident.ActionText(req.Action) + " " + req.Selector.String()
	var rule cbdash.ScheduleRule
	var scheduled bool
	if err == nil {
		rule, scheduled, err = scheduleForm(c)
	}
	if err == nil && scheduled {
		return s.scheduleConfirm(c, v, req, rule)
	}
	if err == nil {
		var plan cbdash.HoldPlan
		if plan, err = hs.PlanHold(c.Request().Context(), req); err == nil && len(plan.Refused) > 0 {
			v.Error = "Pre-flight refuses this drill: " + strings.Join(plan.Refused, "; ") + "."
			return render(c, http.StatusConflict, templates.HoldConfirmPage(v))
		}
		if err == nil {
			v.Blast = blastLines(req, plan)
			return render(c, http.StatusOK, templates.HoldConfirmPage(v))
		}
	}
	if !errors.Is(err, cbdash.ErrInvalid) {
		return err
	}
	v.Error = userMessage(err)
	return render(c, http.StatusBadRequest, templates.HoldConfirmPage(v))
}

// blastLines says in words what a hold would do now.
func blastLines(r cbdash.HoldRequest, p cbdash.HoldPlan) []string {
	what := "reject every call from"
	if r.Action == protocol.ActionForceClosed {
		what = "let every call through, even failing ones, from"
	}
	who := plural(len(p.Instances), "instance", "instances")
	if len(p.Services) > 0 {
		who += " of " + plural(len(p.Services), "service", "services") + " (" + strings.Join(p.Services, ", ") + ")"
	}
	lines := []string{fmt.Sprintf("This will %s %s to %s for %s, then release automatically; instances that start later are held too.",
		what, who, r.Selector.Breaker, exactDuration(r.TTL))}
	if len(p.Instances) > 0 {
		lines = append(lines, "Matching now: "+strings.Join(p.Instances, ", ")+".")
	}
	with := "a " + r.Selector.Breaker + " breaker"
	if len(r.Selector.Labels) > 0 { // the labels choose the instances a share is of
		with += " and " + strings.TrimPrefix(cbdash.Selector{Labels: r.Selector.Labels}.String(), "/ ")
	}
	lines = append(lines, fmt.Sprintf("Share reached: %d of %d live instances with %s.", len(p.Instances), p.Eligible, with))
	if r.Action == protocol.ActionForceOpen {
		lines = append(lines, rejectedCallsLine(p))
	}
	if len(p.Superseded) > 0 {
		lines = append(lines, "It takes precedence over hold "+strings.Join(p.Superseded, ", ")+" where both match (the most recent wins).")
	}
	if len(p.Unsupported) > 0 {
		lines = append(lines, "Not held (holds not supported): "+strings.Join(p.Unsupported, "; ")+".")
	}
	if len(p.Stops) > 0 {
		lines = append(lines, "It stops by itself, everywhere at once, if: "+stopsText(p.Stops)+".")
	}
	if len(r.Steps) > 0 {
		lines = append(lines, "Steps: "+stepsText(r.Steps)+", each only if no stop condition was breached.")
	}
	return lines
}

// holdCreate creates a confirmed fleet-wide hold as the logged-in user
// and shows its drill report, where coverage arrives.
func (s *Server) holdCreate(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	req, err := holdForm(c, actorFrom(c).Name)
	if err != nil {
		return err
	}
	h, err := hs.CreateHold(c.Request().Context(), actorFrom(c), req)
	if err != nil {
		return err
	}
	return redirect(c, holdHref(h.ID))
}

// holdRelease ends a hold before its expiry; the reason is required.
func (s *Server) holdRelease(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	h, err := hs.ReleaseHold(c.Request().Context(), actorFrom(c), c.Param("id"), strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	return redirect(c, holdHref(h.ID))
}

// holdPage renders the drill report of one hold.
func (s *Server) holdPage(c echo.Context) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	r, err := hs.HoldReport(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	now := s.now()
	h := r.Hold
	p := s.page(c, "Hold "+h.ID, "holds")
	base := "/api/v1/holds/" + h.ID + "/report"
	v := templates.HoldReport{
		Page: p, ID: h.ID, Title: incident.ActionText(h.Action) + " " + h.Selector.String(), Status: holdStatus(h, now),
		Summary: reportSummary(r, now), Total: periodView(r.Total),
		ExportMD: base + ".md", ExportJSON: base,
	}
	for _, in := range r.Instances {
		answer := collector.HoldAnswerText(in, r.Ongoing)
		if in.Error != "" {
			answer += ": " + in.Error
		}
		v.Instances = append(v.Instances, templates.HoldInstanceRow{Instance: in.Service + "/" + in.Instance, Breaker: in.Breaker,
			Covered: stamp(in.CoveredAt), JoinedLate: in.JoinedLate, Answer: answer, AnswerOK: in.Status != cbdash.TargetFailed && in.Status != cbdash.TargetExpired,
			HoldPeriodView: periodView(in.During)})
	}
	for _, d := range r.Dependencies {
		v.Dependencies = append(v.Dependencies, templates.HoldDependencyRow{Dependency: d.String(), Href: depHref(d.DependencyKey),
			Before: periodView(d.Before), During: periodView(d.During)})
	}
	if r.Ongoing && p.CanOp {
		v.Release = holdHref(h.ID) + "/release"
	}
	return render(c, http.StatusOK, templates.HoldReportPage(v))
}

func reportSummary(r cbdash.HoldReport, now time.Time) []templates.SummaryItem {
	h := r.Hold
	end := stamp(r.End) + ", expired"
	switch {
	case r.Ongoing:
		end = "ongoing, expires " + holdExpiry(h, now)
	case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
		end = stamp(r.End) + ", released by " + h.ReleasedBy + ": " + h.ReleaseReason
	}
	var insts, late []string
	for _, in := range r.Instances {
		name := in.Service + "/" + in.Instance
		if !slices.Contains(insts, name) {
			insts = append(insts, name)
		}
		if in.JoinedLate && !slices.Contains(late, name) {
			late = append(late, name)
		}
	}
	covered := plural(len(insts), "instance", "instances")
	if len(insts) > 0 {
		covered += ": " + strings.Join(insts, ", ")
	}
	joined := "none"
	if len(late) > 0 {
		joined = strings.Join(late, ", ")
	}
	c := r.Total.Counts
	return []templates.SummaryItem{
		{Label: "scope", Value: h.Selector.String(), TestID: "sum-scope"},
		{Label: "action", Value: incident.ActionText(h.Action), TestID: "sum-action"},
		{Label: "who", Value: h.Actor, TestID: "sum-who"},
		{Label: "why", Value: h.Reason, TestID: "sum-why"},
		{Label: "start", Value: stamp(r.Start) + " UTC", TestID: "sum-start"},
		{Label: "end", Value: end, TestID: "sum-end"},
		{Label: "duration", Value: exactDuration(earlier(r.End, now).Sub(r.Start)), TestID: "sum-duration"},
		{Label: "instances covered", Value: covered, TestID: "sum-covered"},
		{Label: "joined later", Value: joined, TestID: "sum-late"},
		{Label: "callers counted", Value: collector.HoldCallersCounted(r), TestID: "sum-counted"},
		{Label: "calls rejected", Value: strconv.FormatInt(c.Rejected(), 10), TestID: "sum-rejected"},
		{Label: "fallback calls", Value: wording.FallbackCalls(c.FallbackSuccess, c.FallbackFailure), TestID: "sum-fallbacks"},
		{Label: "result", Value: drillResultText(r), TestID: "sum-result"},
		{Label: "stop conditions", Value: cmp.Or(stopsText(h.Stops), "none"), TestID: "sum-stops"},
	}
}

// drillResultText is a drill's result in words: "STOPPED: stop condition:
// ... (first above it: a, b)", "passed", "released", "ongoing".
func drillResultText(r cbdash.HoldReport) string {
	b := r.Hold.Breach
	if b == nil {
		return r.Result
	}
	s := "STOPPED: " + b.Reason()
	if len(b.Instances) > 0 {
		s += " (first above it: " + strings.Join(b.Instances, ", ") + ")"
	}
	return s
}

// stepsText writes steps as the CLI takes them: "5%:1m0s,25%:2m0s".
func stepsText(steps []cbdash.HoldStep) string {
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = strconv.FormatFloat(st.Share, 'f', -1, 64) + "%:" + st.For.String()
	}
	return strings.Join(parts, ",")
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func periodView(p cbdash.HoldPeriod) templates.HoldPeriodView {
	v := templates.HoldPeriodView{
		Calls: strconv.FormatInt(p.Calls, 10), Rejected: strconv.FormatInt(p.Counts.Rejected(), 10),
		FallbacksServed: strconv.FormatInt(p.Counts.FallbackSuccess, 10), FallbacksFailed: strconv.FormatInt(p.Counts.FallbackFailure, 10),
		ErrorRate: "–", P50: "–", P99: "–",
	}
	if p.Calls > 0 {
		v.ErrorRate = strconv.FormatFloat(p.ErrorRate, 'f', 1, 64) + "%"
	}
	if p.P50 > 0 || p.P99 > 0 {
		v.P50, v.P99 = wording.Latency(p.P50), wording.Latency(p.P99)
	}
	return v
}

// holdIDOf is the hold a command applied: holdID when set, else the one
// its id names (cbdash.HoldOfCommand); "" for a command of its own.
func holdIDOf(holdID, commandID string) string {
	if holdID != "" {
		return holdID
	}
	id, _ := cbdash.HoldOfCommand(commandID)
	return id
}

// rejectedCallsLine tells the calls per second a force open of plan p
// rejects: every matching breaker's, or, when some instances' calls are
// not known here (HoldPlan.CallsUnknown), at least those counted.
func rejectedCallsLine(p cbdash.HoldPlan) string {
	if p.CallsUnknown == 0 {
		return "Calls that will be rejected: about " + wording.PerSecond(p.CallsPerSecond) + " (their last report)."
	}
	which := "1 instance"
	if p.CallsUnknown > 1 {
		which = fmt.Sprintf("%d instances", p.CallsUnknown)
	}
	return "Calls that will be rejected: more than " + wording.PerSecond(p.CallsPerSecond) +
		" (their last report; the calls of " + which + " served by other collectors are not known here)."
}
