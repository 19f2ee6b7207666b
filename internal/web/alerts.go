package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// Silences, CreateSilence, ExpireSilence and Ack: see alert.Service.
	Silences(ctx context.Context, all bool) ([]cbdash.Silence, error)
	CreateSilence(ctx context.Context, sl cbdash.Silence, actor string) (cbdash.Silence, error)
	ExpireSilence(ctx context.Context, id int64, actor string) error
	Ack(ctx context.Context, ruleID int64, subject, actor string) error
}

// mountAlerts registers the alerts page (read) and the rule editor's
// actions (op).
func (s *Server) mountAlerts(read, op routes) {
	read.GET("/alerts", s.alertsPage)
	op.POST("/alerts/rules", s.createAlertRule)
	op.POST("/alerts/rules/:id", s.updateAlertRule)
	op.POST("/alerts/rules/:id/delete", s.deleteAlertRule)
	op.POST("/alerts/rules/:id/test", s.testAlertRule)
	op.POST("/alerts/silences", s.createSilence)
	op.POST("/alerts/silences/:id/expire", s.expireSilence)
	op.POST("/alerts/acks", s.ackAlert)
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
	sls, err := a.Silences(ctx, false)
	if err != nil {
		return v, err
	}
	firing := map[int64]int{}
	for _, f := range a.Alerts() {
		firing[f.RuleID]++
		v.Firing = append(v.Firing, firingRow(f, byID[f.RuleID], sls, now, v.Page))
	}
	for _, sl := range sls {
		v.Silences = append(v.Silences, silenceRow(sl, v.CanOp))
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

// firingRow is f on the page: whether it notifies (a silence active at
// now matching its subject, an acknowledgement), and for an operator the
// acknowledge button.
func firingRow(f cbdash.FiringAlert, r cbdash.AlertRule, sls []cbdash.Silence, now time.Time, p templates.Page) templates.FiringRow {
	row := templates.FiringRow{Rule: ruleName(r), Kind: r.Kind, Subject: f.Subject,
		RuleHref: "/alerts?edit=" + strconv.FormatInt(r.ID, 10), Since: stamp(f.Since), For: roughDuration(now.Sub(f.Since)),
		SinceMs: f.Since.UnixMilli(), Detail: f.Detail, Notified: "yes", RuleID: strconv.FormatInt(f.RuleID, 10), CSRF: p.CSRF}
	if sl, ok := alert.SilenceOf(f.Subject, f.Labels, sls, now); ok {
		row.Notified, row.Quiet = fmt.Sprintf("silenced by silence %d until %s", sl.ID, stamp(sl.EndsAt)), true
	}
	if f.AckedBy != "" {
		ack := fmt.Sprintf("acknowledged by %s at %s", f.AckedBy, stamp(f.AckedAt))
		if row.Quiet {
			row.Notified += "; " + ack
		} else {
			row.Notified, row.Quiet = ack, true
		}
	} else if p.CanOp {
		row.AckURL = "/alerts/acks"
	}
	return row
}

func silenceRow(sl cbdash.Silence, canOp bool) templates.SilenceRow {
	row := templates.SilenceRow{ID: strconv.FormatInt(sl.ID, 10), Matches: silenceMatches(sl.Matchers), Ends: stamp(sl.EndsAt),
		By: sl.CreatedBy, Reason: sl.Reason}
	if canOp {
		row.ExpireURL = "/alerts/silences/" + row.ID + "/expire"
	}
	return row
}

// silenceMatches is m in one line ("service=checkout breaker=payments
// team=pay"), labels sorted.
func silenceMatches(m cbdash.SilenceMatchers) string {
	var parts []string
	if m.Service != "" {
		parts = append(parts, "service="+m.Service)
	}
	if m.Breaker != "" {
		parts = append(parts, "breaker="+m.Breaker)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
		parts = append(parts, k+"="+m.Labels[k])
	}
	return strings.Join(parts, " ")
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
	case cbdash.AlertFallbackUnexercised:
		params = append(params, "not exercised for "+alert.DurationText(cmp.Or(r.For, alert.DefaultFallbackFor)))
	case cbdash.AlertHeadroom:
		m := r.Margin
		if m == 0 {
			m = 10
		}
		params = append(params, "margin "+strconv.FormatFloat(m, 'f', -1, 64)+" points")
	}
	if r.GroupBy != "" {
		params = append(params, "grouped by "+r.GroupBy+" (wait "+durationOr(r.GroupWait, alert.DefaultGroupWait)+
			", interval "+durationOr(r.GroupInterval, alert.DefaultGroupInterval)+")")
	}
	row.Params = strings.Join(append(params, "hold "+durationOr(r.Hold, 2*time.Minute)), ", ")
	row.Webhook = alert.ShowURL(r.WebhookURL, admin)
	return row
}

// durationField is d in a form field: "" for 0.
func durationField(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
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
	case d.Attempts == 0:
		row.Outcome = "not sent: " + d.Error // held back by a silence
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
	{cbdash.AlertFallbackUnexercised, "fallback_unexercised: the fallback has not served rejected calls for For (30d)"},
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
		f.For = alert.DurationText(r.For)
	}
	if r.Hold > 0 {
		f.Hold = r.Hold.String()
	}
	if r.Margin > 0 {
		f.Margin = strconv.FormatFloat(r.Margin, 'f', -1, 64)
	}
	if r.FlapCount > 0 {
		f.FlapCount = strconv.Itoa(r.FlapCount)
	}
	f.GroupBy = r.GroupBy
	f.FlapWindow, f.GroupWait, f.GroupInterval = durationField(r.FlapWindow), durationField(r.GroupWait), durationField(r.GroupInterval)
	if f.WebhookHidden {
		f.Webhook = ""
	}
	for _, k := range alertKinds {
		f.Kinds = append(f.Kinds, templates.Option{Value: k[0], Text: k[1], Selected: k[0] == r.Kind})
	}
	for _, k := range [][2]string{{cbdash.FormatJSON, "json (generic)"}, {cbdash.FormatSlack, "slack (incoming webhook)"},
		{cbdash.FormatPagerDuty, "pagerduty (Events API v2; ?routing_key= in the URL)"}} {
		f.Formats = append(f.Formats, templates.Option{Value: k[0], Text: k[1], Selected: k[0] == r.Format || (r.Format == "" && k[0] == cbdash.FormatJSON)})
	}
	return f
}

// formRule reads the editor's fields; errors wrap cbdash.ErrInvalid and
// name the field.
func formRule(c echo.Context) (cbdash.AlertRule, error) {
	r := cbdash.AlertRule{Name: strings.TrimSpace(c.FormValue("name")), Service: strings.TrimSpace(c.FormValue("service")),
		Breaker: strings.TrimSpace(c.FormValue("breaker")), Kind: c.FormValue("kind"), WebhookURL: strings.TrimSpace(c.FormValue("webhook_url")),
		Format: c.FormValue("format"), Disabled: c.FormValue("disabled") == "true", GroupBy: c.FormValue("group_by")}
	var err error
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"for", &r.For}, {"hold", &r.Hold}, {"flap_window", &r.FlapWindow}, {"group_wait", &r.GroupWait}, {"group_interval", &r.GroupInterval}} {
		if *d.to, err = alert.ParseDuration(d.name, strings.TrimSpace(c.FormValue(d.name))); err != nil {
			return r, err
		}
	}
	if v := strings.TrimSpace(c.FormValue("flap_count")); v != "" {
		if r.FlapCount, err = strconv.Atoi(v); err != nil || r.FlapCount < 0 {
			return r, errorf(cbdash.ErrInvalid, "flap_count must be a whole number of opens (got %q)", v)
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
	return &templates.AlertsCount{Firing: len(s.cfg.Alerts.Alerts()), Silences: s.quiet.active(s.cfg.Alerts, s.now())}
}

// silenceCount caches how many silences are active, read from the store
// at most every silenceCountTTL: the overview's live counter asks at
// every flush. The zero value is ready to use.
type silenceCount struct {
	mu     sync.Mutex
	at     time.Time // when n was read; zero = never
	n      int
	ending time.Time // the earliest end of a silence counted
}

const silenceCountTTL = 5 * time.Second

// active returns the count at now, reading it again (outside the lock)
// when older than the TTL or when a counted silence has ended.
func (c *silenceCount) active(a Alerts, now time.Time) int {
	c.mu.Lock()
	fresh := !c.at.IsZero() && now.Sub(c.at) < silenceCountTTL && (c.ending.IsZero() || now.Before(c.ending))
	n := c.n
	c.mu.Unlock()
	if fresh {
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sls, err := a.Silences(ctx, false)
	if err != nil {
		return n
	}
	n = 0
	var ending time.Time
	for _, sl := range sls {
		if sl.Active(now) {
			n++
			if ending.IsZero() || sl.EndsAt.Before(ending) {
				ending = sl.EndsAt
			}
		}
	}
	c.mu.Lock()
	c.at, c.n, c.ending = now, n, ending
	c.mu.Unlock()
	return n
}

// forget makes the next count read the store (a silence was created or
// expired here).
func (c *silenceCount) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// createSilence creates a silence from the page's form as the caller.
func (s *Server) createSilence(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	req := alert.SilenceRequest{Matchers: cbdash.SilenceMatchers{Service: strings.TrimSpace(c.FormValue("service")),
		Breaker: strings.TrimSpace(c.FormValue("breaker"))}, Reason: strings.TrimSpace(c.FormValue("reason")), For: strings.TrimSpace(c.FormValue("for"))}
	for _, kv := range strings.Fields(c.FormValue("labels")) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return errorf(cbdash.ErrInvalid, "labels: %q is not key=value", kv)
		}
		if req.Matchers.Labels == nil {
			req.Matchers.Labels = map[string]string{}
		}
		req.Matchers.Labels[k] = val
	}
	sl, err := req.Silence(s.now())
	if err == nil {
		sl, err = a.CreateSilence(c.Request().Context(), sl, actorOf(c))
	}
	if err != nil {
		return err
	}
	s.quiet.forget()
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Silence %d of %s until %s UTC created.", sl.ID, silenceMatches(sl.Matchers), stamp(sl.EndsAt))))
}

// expireSilence ends silence :id now as the caller.
func (s *Server) expireSilence(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := idParam(c, "silence")
	if err != nil {
		return err
	}
	if err := a.ExpireSilence(c.Request().Context(), id, actorOf(c)); err != nil {
		return err
	}
	s.quiet.forget()
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Silence %d ended.", id)))
}

// ackAlert acknowledges a firing alert (form fields rule_id, subject) as
// the caller.
func (s *Server) ackAlert(c echo.Context) error {
	a, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := ruleID(c.FormValue("rule_id"))
	if err != nil {
		return err
	}
	subject := c.FormValue("subject")
	if err := a.Ack(c.Request().Context(), id, subject, actorOf(c)); err != nil {
		return err
	}
	return redirect(c, "/alerts?notice="+url.QueryEscape(fmt.Sprintf("Acknowledged %s (rule %d).", subject, id)))
}
