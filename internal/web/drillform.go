package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// Drills from the dependency page's operator panel (issue 32): its stop
// conditions, steps and schedule are the fleet-wide hold form's fields
// (drillForm, scheduleForm), read by the same handlers: a force open
// with any of them goes through the hold's confirmation (pre-flight, the
// blast radius) instead of a plain command.

// drillFields are the operator panel's fields that make a force a drill
// (or a scheduled one).
var drillFields = []string{"stop_if", "drop_stop_if", "drop_reason", "steps"}

// isDrill reports whether the posted operator form asks for a drill:
// stop conditions, steps or a schedule.
func isDrill(c echo.Context) bool {
	for _, n := range drillFields {
		if strings.TrimSpace(c.FormValue(n)) != "" {
			return true
		}
	}
	w := c.FormValue("when")
	return w == whenOnce || w == whenWeekly
}

// When a drill runs (the form's "when").
const (
	whenNow    = "now"
	whenOnce   = "once"
	whenWeekly = "weekly"
)

// scheduleForm reads the form's schedule: when (now, once, weekly), at
// (a once drill's start, "2006-01-02T15:04" in UTC, as a datetime-local
// input posts it), day ("day" = every day, or mon..sun) and time ("HH:MM"
// UTC) of a weekly one. ok is false for now. Errors wrap
// cbdash.ErrInvalid and name the field.
func scheduleForm(c echo.Context) (rule cbdash.ScheduleRule, ok bool, err error) {
	var text string
	switch c.FormValue("when") {
	case "", whenNow:
		return rule, false, nil
	case whenOnce:
		v := strings.TrimSpace(c.FormValue("at"))
		at, perr := time.ParseInLocation("2006-01-02T15:04", v, time.UTC)
		if perr != nil {
			if at, perr = time.ParseInLocation("2006-01-02T15:04:05", v, time.UTC); perr != nil {
				return rule, false, errorf(cbdash.ErrInvalid, "at: a date and time (UTC) is required to schedule a drill once, got %q", v)
			}
		}
		text = "at " + at.UTC().Format(time.RFC3339)
	case whenWeekly:
		day, hhmm := strings.TrimSpace(c.FormValue("day")), strings.TrimSpace(c.FormValue("time"))
		if day == "" || hhmm == "" {
			return rule, false, errorf(cbdash.ErrInvalid, "day and time (UTC) are required to schedule a weekly drill")
		}
		text = "every " + day + " " + hhmm
	default:
		return rule, false, errorf(cbdash.ErrInvalid, "when must be now, once or weekly")
	}
	rule, err = cbdash.ParseScheduleRule(text)
	return rule, err == nil, err
}

// operatorDrill confirms the operator panel's drill: its fields are
// written as the fleet-wide hold form's (this service, the instance or
// share chosen) and confirmed by holdConfirm.
func (s *Server) operatorDrill(c echo.Context, f commandForm) error {
	if f.action != protocol.ActionForceOpen {
		return errorf(cbdash.ErrInvalid, "stop conditions, steps and schedules are for a force open (a drill), not %s", strings.ReplaceAll(f.action, "_", " "))
	}
	share := c.FormValue("share")
	form := c.Request().Form
	form.Set("from", f.key.Service)
	form.Set("service", f.key.Service)
	form.Set("instances", "")
	form.Set("labels", "")
	form.Set("share", "")
	switch f.scope {
	case "instance":
		form.Set("instances", f.instance)
	case "share":
		form.Set("share", share)
	}
	return s.holdConfirm(c)
}

// scheduleConfirm is holdConfirm for a scheduled drill: what it would
// hold now, pre-flight's view now (a warning: pre-flight runs again at
// each due time) and its next run; confirming posts to /holds/schedule.
func (s *Server) scheduleConfirm(c echo.Context, v templates.HoldConfirm, req cbdash.HoldRequest, rule cbdash.ScheduleRule) error {
	hs, err := s.holdService()
	if err != nil {
		return err
	}
	sreq := cbdash.ScheduleRequest{HoldRequest: req, Rule: rule}
	v.Title, v.Action, v.Button = "Schedule a drill: force open "+req.Selector.String(), "/holds/schedule", "Yes, schedule it"
	if err := sreq.Validate(s.maxHold()); err != nil {
		v.Error = userMessage(err)
		return render(c, http.StatusBadRequest, templates.HoldConfirmPage(v))
	}
	next, ok := cbdash.DrillSchedule{ScheduleRequest: sreq, CreatedAt: s.now()}.NextRunAfter()
	if !ok {
		v.Error = "The schedule " + rule.String() + " (UTC) is not in the future: it would never run."
		return render(c, http.StatusBadRequest, templates.HoldConfirmPage(v))
	}
	plan, err := hs.PlanHold(c.Request().Context(), req)
	if err != nil {
		return err
	}
	v.Blast = []string{"Runs " + rule.String() + " (UTC), for " + exactDuration(req.TTL) + " each; the next run is " +
		next.UTC().Format("Mon 2006-01-02 15:04 UTC") + ". At each due time pre-flight runs; a refused run is skipped with the reason."}
	if len(plan.Refused) > 0 {
		v.Blast = append(v.Blast, "Pre-flight would refuse it now: "+strings.Join(plan.Refused, "; ")+".")
	}
	v.Blast = append(v.Blast, blastLines(req, plan)...)
	return render(c, http.StatusOK, templates.HoldConfirmPage(v))
}

// scheduleCreate stores a confirmed drill schedule as the logged-in user
// and shows it in the holds page's list of schedules.
func (s *Server) scheduleCreate(c echo.Context) error {
	ss, err := s.scheduleService()
	if err != nil {
		return err
	}
	req, err := holdForm(c, actorFrom(c).Name)
	if err != nil {
		return err
	}
	rule, ok, err := scheduleForm(c)
	if err != nil {
		return err
	}
	if !ok {
		return errorf(cbdash.ErrInvalid, "when: choose once or weekly to schedule a drill")
	}
	d, err := ss.CreateSchedule(c.Request().Context(), actorFrom(c), cbdash.ScheduleRequest{HoldRequest: req, Rule: rule})
	if err != nil {
		return err
	}
	return redirect(c, "/holds#schedule-"+d.ID)
}
