package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/web/templates"
)

// Alerts is the alert service the alerts page edits and the overview
// counts. *alert.Service implements it. Rule errors wrap cbdash.ErrInvalid
// (naming the field) or cbdash.ErrNotFound.
type Alerts interface {
	Rules(ctx context.Context) ([]cbdash.AlertRule, error)
	Rule(ctx context.Context, id int64) (cbdash.AlertRule, error)
	CreateRule(ctx context.Context, r cbdash.AlertRule) (cbdash.AlertRule, error)
	UpdateRule(ctx context.Context, r cbdash.AlertRule) error
	DeleteRule(ctx context.Context, id int64) error
	// Test sends one test notification for a rule and returns its
	// delivery log entry.
	Test(ctx context.Context, id int64) (cbdash.AlertDelivery, error)
	Deliveries(ctx context.Context, q cbdash.DeliveryQuery) ([]cbdash.AlertDelivery, error)
	// Alerts returns the alerts firing now, longest firing first.
	Alerts() []cbdash.FiringAlert
	// Firing returns the subjects firing now per rule id.
	Firing() map[int64][]string
}

// mountAlerts registers the alerts page (read) and the rule editor's
// actions (op).
func (s *Server) mountAlerts(read, op routes) {
	read.GET("/alerts", s.alertsPage)
	op.POST("/alerts/rules", s.createAlertRule)
	op.POST("/alerts/rules/:id", s.updateAlertRule)
	op.POST("/alerts/rules/:id/delete", s.deleteAlertRule)
	op.POST("/alerts/rules/:id/test", s.testAlertRule)
}

func (s *Server) alerts() (Alerts, error) {
	if s.cfg.Alerts == nil {
		return nil, errorf(cbdash.ErrNotFound, "this server evaluates no alerts")
	}
	return s.cfg.Alerts, nil
}

// alertsPage renders the page; ?edit=ID opens a rule in the editor,
// ?notice= shows the outcome of the last action and ?fragment=firing
// answers only the list of alerts firing, which the page polls.
func (s *Server) alertsPage(c echo.Context) error {
	v, err := s.alertsModel(c, nil)
	if err != nil {
		return err
	}
	if c.QueryParam("fragment") == "firing" {
		return render(c, http.StatusOK, templates.FiringList(v.Firing))
	}
	if id := c.QueryParam("edit"); id != "" && v.CanOp {
		a, _ := s.alerts()
		n, err := ruleID(id)
		if err != nil {
			return err
		}
		r, err := a.Rule(c.Request().Context(), n)
		if err != nil {
			return err
		}
		v.Form = ruleForm(r, true, !v.IsAdmin)
		for i := range v.Rules {
			v.Rules[i].Editing = v.Rules[i].ID == id
		}
	}
	v.Notice = c.QueryParam("notice")
	return render(c, http.StatusOK, templates.AlertsPage(v))
}

// alertsModel builds the page; form, when not nil, is the editor's
// content (a refused change shown again).
func (s *Server) alertsModel(c echo.Context, form *templates.AlertForm) (templates.Alerts, error) {
	a, err := s.alerts()
	if err != nil {
		return templates.Alerts{}, err
	}
	ctx := c.Request().Context()
	v := templates.Alerts{Page: s.page(c, "Alerts", "alerts")}
	rules, err := a.Rules(ctx)
	if err != nil {
		return v, err
	}
	byID := make(map[int64]cbdash.AlertRule, len(rules))
	for _, r := range rules {
		byID[r.ID] = r
	}
	now := s.now()
	firing := map[int64]int{}
	for _, f := range a.Alerts() {
		firing[f.RuleID]++
		r := byID[f.RuleID]
		v.Firing = append(v.Firing, templates.FiringRow{Rule: ruleName(r), Kind: r.Kind, Subject: f.Subject,
			RuleHref: "/alerts?edit=" + strconv.FormatInt(r.ID, 10), Since: stamp(f.Since), For: roughDuration(now.Sub(f.Since)),
			SinceMs: f.Since.UnixMilli(), Detail: f.Detail})
	}
	for _, r := range rules {
		v.Rules = append(v.Rules, ruleRow(r, firing[r.ID], v.IsAdmin))
	}
	ds, err := a.Deliveries(ctx, cbdash.DeliveryQuery{Limit: 20})
	if err != nil {
		return v, err
	}
	for _, d := range ds {
		v.Deliveries = append(v.Deliveries, deliveryRow(d, byID[d.RuleID]))
	}
	if form != nil {
		v.Form = *form
	} else {
		v.Form = ruleForm(cbdash.AlertRule{Kind: cbdash.AlertOpen, Format: cbdash.FormatJSON}, false, false)
	}
	return v, nil
}

func ruleName(r cbdash.AlertRule) string {
	if r.Name != "" {
		return r.Name
	}
	if r.ID == 0 {
		return "(deleted rule)"
	}
	return "rule " + strconv.FormatInt(r.ID, 10)
}

func ruleID(v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, errorf(cbdash.ErrNotFound, "alert rule %q", v)
	}
	return id, nil
}

func ruleRow(r cbdash.AlertRule, firing int, admin bool) templates.AlertRuleRow {
	id := strconv.FormatInt(r.ID, 10)
	row := templates.AlertRuleRow{ID: id, Name: ruleName(r), Kind: r.Kind, Format: r.Format, Enabled: !r.Disabled, Firing: firing,
		EditHref: "/alerts?edit=" + id, TestURL: "/alerts/rules/" + id + "/test", DeleteURL: "/alerts/rules/" + id + "/delete"}
	row.Scope = r.Service + " (every breaker)"
	if r.Breaker != "" {
		row.Scope = r.Service + "/" + r.Breaker
	}
	var params []string
	switch r.Kind {
	case cbdash.AlertHalfOpenLong:
		params = append(params, "for "+durationOr(r.For, 30*time.Second))
	case cbdash.AlertHeadroom:
		m := r.Margin
		if m == 0 {
			m = 10
		}
		params = append(params, "margin "+strconv.FormatFloat(m, 'f', -1, 64)+" points")
	}
	row.Params = strings.Join(append(params, "hold "+durationOr(r.Hold, 2*time.Minute)), ", ")
	row.Webhook = alert.ShowURL(r.WebhookURL, admin)
	return row
}

func durationOr(d, def time.Duration) string {
	if d <= 0 {
		d = def
	}
	return d.String()
}

func deliveryRow(d cbdash.AlertDelivery, r cbdash.AlertRule) templates.DeliveryRow {
	row := templates.DeliveryRow{At: stamp(d.At), Rule: ruleName(r), Event: d.Event, Subject: d.Subject, OK: d.OK}
	switch {
	case d.OK:
		row.Outcome = fmt.Sprintf("delivered (HTTP %d, %s)", d.Status, plural(d.Attempts, "attempt", "attempts"))
	case d.Status != 0:
		row.Outcome = fmt.Sprintf("failed: HTTP %d after %s", d.Status, plural(d.Attempts, "attempt", "attempts"))
	default:
		row.Outcome = fmt.Sprintf("failed after %s: %s", plural(d.Attempts, "attempt", "attempts"), d.Error)
	}
	return row
}

var alertKinds = [][2]string{
	{cbdash.AlertOpen, "open: the breaker is open or half-open"},
	{cbdash.AlertHalfOpenLong, "half_open_long: half-open longer than For"},
	{cbdash.AlertHeadroom, "headroom: a rate within Margin of its threshold"},
	{cbdash.AlertStale, "stale: an instance stopped reporting"},
	{cbdash.AlertDrillStopped, "drill stopped: a stop condition ended a drill"},
}

// ruleForm fills the editor with r; hideWebhook leaves its URL out.
func ruleForm(r cbdash.AlertRule, editing, hideWebhook bool) templates.AlertForm {
	f := templates.AlertForm{Action: "/alerts/rules", Editing: editing, Name: r.Name, Service: r.Service, Breaker: r.Breaker,
		Kind: r.Kind, Webhook: r.WebhookURL, Format: r.Format, Disabled: r.Disabled, WebhookHidden: editing && hideWebhook}
	if editing {
		f.ID = strconv.FormatInt(r.ID, 10)
		f.Action = "/alerts/rules/" + f.ID
	}
	if r.For > 0 {
		f.For = r.For.String()
	}
	if r.Hold > 0 {
		f.Hold = r.Hold.String()
	}
	if r.Margin > 0 {
		f.Margin = strconv.FormatFloat(r.Margin, 'f', -1, 64)
	}
	if f.WebhookHidden {
		f.Webhook = ""
	}
	for _, k := range alertKinds {
		f.Kinds = append(f.Kinds, templates.Option{Value: k[0], Text: k[1], Selected: k[0] == r.Kind})
	}
	for _, k := range [][2]string{{cbdash.FormatJSON, "json (generic)"}, {cbdash.FormatSlack, "slack ({\"text\": ...})"}} {
		f.Formats = append(f.Formats, templates.Option{Value: k[0], Text: k[1], Selected: k[0] == r.Format || (r.Format == "" && k[0] == cbdash.FormatJSON)})
	}
	return f
}

// formRule reads the editor's fields; errors wrap cbdash.ErrInvalid and
// name the field.
func formRule(c echo.Context) (cbdash.AlertRule, error) {
	r := cbdash.AlertRule{Name: strings.TrimSpace(c.FormValue("name")), Service: strings.TrimSpace(c.FormValue("service")),
		Breaker: strings.TrimSpace(c.FormValue("breaker")), Kind: c.FormValue("kind"), WebhookURL: strings.TrimSpace(c.FormValue("webhook_url")),
		Format: c.FormValue("format"), Disabled: c.FormValue("disabled") == "true"}
	var err error
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"for", &r.For}, {"hold", &r.Hold}} {
		if v := strings.TrimSpace(c.FormValue(d.name)); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil || *d.to < 0 {
				return r, errorf(cbdash.ErrInvalid, "%s must be a duration like 30s or 2m (got %q)", d.name, v)
			}
		}
	}
	if v := strings.TrimSpace(c.FormValue("margin")); v != "" {
		if r.Margin, err = strconv.ParseFloat(v, 64); err != nil {
			return r, errorf(cbdash.ErrInvalid, "margin must be a number of percentage points (got %q)", v)
		}
	}
	return r, nil
}

// refuse shows the editor again with what was entered and why it was
// refused (400). hideWebhook leaves r's webhook URL out (the stored one,
// kept by an empty field, which a caller who is not an admin may not see).
func (s *Server) refuse(c echo.Context, r cbdash.AlertRule, editing, hideWebhook bool, cause error) error {
	if !errors.Is(cause, cbdash.ErrInvalid) {
		return cause
	}
	f := ruleForm(r, editing, hideWebhook)
	if !hideWebhook {
		f.Webhook = r.WebhookURL
	}
	v, err := s.alertsModel(c, &f)
	if err != nil {
		return err
	}
	v.Error = "Not saved: " + cause.Error()
	return render(c, http.StatusBadRequest, templates.AlertsPage(v))
}

func (s *Server) createAlertRule(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	r, err := formRule(c)
	if err == nil {
		r, err = a.CreateRule(c.Request().Context(), r)
	}
	if err != nil {
		return s.refuse(c, r, false, false, err)
	}
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Rule %d (%s) created.", r.ID, ruleName(r))))
}

func (s *Server) updateAlertRule(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := ruleID(c.Param("id"))
	if err != nil {
		return err
	}
	old, err := a.Rule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	r, err := formRule(c)
	r.ID = id
	kept := r.WebhookURL == ""
	if kept { // a hidden URL is kept
		r.WebhookURL = old.WebhookURL
	}
	if err == nil {
		err = a.UpdateRule(c.Request().Context(), r)
	}
	if err != nil {
		return s.refuse(c, r, true, kept && !IsAdmin(c), err)
	}
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Rule %d (%s) saved.", id, ruleName(r))))
}

func (s *Server) deleteAlertRule(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := ruleID(c.Param("id"))
	if err != nil {
		return err
	}
	if err := a.DeleteRule(c.Request().Context(), id); err != nil {
		return err
	}
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Rule %d deleted.", id)))
}

func (s *Server) testAlertRule(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := ruleID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 15*time.Second)
	defer cancel()
	d, err := a.Test(ctx, id)
	if err != nil && d.Attempts == 0 {
		return err
	}
	r, _ := a.Rule(c.Request().Context(), id)
	notice := fmt.Sprintf("Test notification for rule %d (%s): %s.", id, ruleName(r), deliveryRow(d, r).Outcome)
	return redirect(c, "/alerts?notice="+url.QueryEscape(notice))
}

// alertsCount is the overview's firing count; nil without alerts.
func (s *Server) alertsCount() *templates.AlertsCount {
	if s.cfg.Alerts == nil {
		return nil
	}
	return &templates.AlertsCount{Firing: len(s.cfg.Alerts.Alerts())}
}
