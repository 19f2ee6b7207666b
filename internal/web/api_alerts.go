package web

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
)

// mountAlertsAPI registers under /api/v1/alerts: GET rules, GET
// rules/:id, GET deliveries (?rule=ID&limit=N) and GET firing (read); POST
// rules, PUT rules/:id and DELETE rules/:id (op). Webhook URLs are shown
// whole to admins only, masked (alert.MaskURL) to everyone else.
func (s *Server) mountAlertsAPI(read, op routes) {
	read.GET("/api/v1/alerts/rules", s.apiAlertRules)
	read.GET("/api/v1/alerts/rules/:id", s.apiAlertRule)
	op.POST("/api/v1/alerts/rules", s.apiCreateAlertRule)
	op.PUT("/api/v1/alerts/rules/:id", s.apiUpdateAlertRule)
	op.DELETE("/api/v1/alerts/rules/:id", s.apiDeleteAlertRule)
	read.GET("/api/v1/alerts/deliveries", s.apiAlertDeliveries)
	read.GET("/api/v1/alerts/firing", s.apiAlertsFiring)
	read.GET("/api/v1/alerts/silences", s.apiSilences)
	op.POST("/api/v1/alerts/silences", s.apiCreateSilence)
	op.DELETE("/api/v1/alerts/silences/:id", s.apiExpireSilence)
	op.POST("/api/v1/alerts/acks", s.apiAck)
}

// alertsAndID is the alert service and the :id of a rule's route.
func (s *Server) alertsAndID(c echo.Context) (Alerts, int64, error) {
	as, err := s.alerts()
	if err != nil {
		return nil, 0, err
	}
	id, err := idParam(c, "alert rule")
	return as, id, err
}

func (s *Server) apiAlertRules(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	rules, err := as.Rules(c.Request().Context())
	if err != nil {
		return err
	}
	firing := as.Firing()
	out := make([]alert.RuleJSON, 0, len(rules))
	for _, r := range rules {
		out = append(out, alert.RuleOut(r, firing[r.ID], IsAdmin(c)))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) apiAlertRule(c echo.Context) error {
	as, id, err := s.alertsAndID(c)
	if err != nil {
		return err
	}
	r, err := as.Rule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, alert.RuleOut(r, as.Firing()[r.ID], IsAdmin(c)))
}

func bindRule(c echo.Context) (cbdash.AlertRule, error) {
	var j alert.RuleJSON
	if err := decodeBody(c, "rule body", &j); err != nil {
		return cbdash.AlertRule{}, err
	}
	return j.Rule()
}

func (s *Server) apiCreateAlertRule(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	r, err := bindRule(c)
	if err != nil {
		return err
	}
	if r, err = as.CreateRule(c.Request().Context(), r); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, alert.RuleOut(r, nil, IsAdmin(c)))
}

// apiUpdateAlertRule rewrites rule :id; a webhook URL sent back as it was
// shown masked keeps the stored one (alert.Service.UpdateRule).
func (s *Server) apiUpdateAlertRule(c echo.Context) error {
	as, id, err := s.alertsAndID(c)
	if err != nil {
		return err
	}
	r, err := bindRule(c)
	if err != nil {
		return err
	}
	r.ID = id
	ctx := c.Request().Context()
	if err := as.UpdateRule(ctx, r); err != nil {
		return err
	}
	if r, err = as.Rule(ctx, id); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, alert.RuleOut(r, nil, IsAdmin(c)))
}

func (s *Server) apiDeleteAlertRule(c echo.Context) error {
	as, id, err := s.alertsAndID(c)
	if err != nil {
		return err
	}
	if err := as.DeleteRule(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) apiAlertDeliveries(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	var q cbdash.DeliveryQuery
	if v := c.QueryParam("rule"); v != "" {
		if q.RuleID, err = strconv.ParseInt(v, 10, 64); err != nil {
			return errorf(cbdash.ErrInvalid, "rule must be a rule id")
		}
	}
	if q.Limit, err = limitParam(c.QueryParam, 10000); err != nil {
		return err
	}
	ds, err := as.Deliveries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []cbdash.AlertDelivery{}
	}
	return c.JSON(http.StatusOK, alert.DeliveriesOut(ds, IsAdmin(c)))
}

// apiAlertsFiring answers the alerts firing now, longest firing first.
func (s *Server) apiAlertsFiring(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	rules, err := as.Rules(c.Request().Context())
	if err != nil {
		return err
	}
	sls, err := as.Silences(c.Request().Context(), false)
	if err != nil {
		return err
	}
	firing := as.Alerts()
	out := alert.FiringOut(rules, firing, s.now())
	alert.MarkSilenced(out, firing, sls, s.now())
	return c.JSON(http.StatusOK, out)
}

// apiSilences answers the silences active now or later, newest first;
// ?all=true every one, ended and expired ones too (the audit trail).
func (s *Server) apiSilences(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	sls, err := as.Silences(c.Request().Context(), c.QueryParam("all") == "true")
	if err != nil {
		return err
	}
	if sls == nil {
		sls = []cbdash.Silence{}
	}
	return c.JSON(http.StatusOK, sls)
}

// apiCreateSilence creates a silence (alert.SilenceRequest) as the
// caller: 201 with the silence stored.
func (s *Server) apiCreateSilence(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	var req alert.SilenceRequest
	if err := decodeBody(c, "silence body", &req); err != nil {
		return err
	}
	sl, err := req.Silence(s.now())
	if err != nil {
		return err
	}
	if sl, err = as.CreateSilence(c.Request().Context(), sl, actorOf(c)); err != nil {
		return err
	}
	s.quiet.forget()
	return c.JSON(http.StatusCreated, sl)
}

// apiExpireSilence ends silence :id now, as the caller: 204.
func (s *Server) apiExpireSilence(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	id, err := idParam(c, "silence")
	if err != nil {
		return err
	}
	if err := as.ExpireSilence(c.Request().Context(), id, actorOf(c)); err != nil {
		return err
	}
	s.quiet.forget()
	return c.NoContent(http.StatusNoContent)
}

// apiAck acknowledges a firing alert (alert.AckRequest) as the caller:
// 204; 404 when it is not firing.
func (s *Server) apiAck(c echo.Context) error {
	as, err := s.alerts()
	if err != nil {
		return err
	}
	var req alert.AckRequest
	if err := decodeBody(c, "ack body", &req); err != nil {
		return err
	}
	if req.RuleID == 0 || req.Subject == "" {
		return errorf(cbdash.ErrInvalid, "rule_id and subject are required")
	}
	if err := as.Ack(c.Request().Context(), req.RuleID, req.Subject, actorOf(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
