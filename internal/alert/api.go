package alert

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
)

// API serves the alert rules CRUD and the delivery log. It is safe for
// concurrent use.
type API struct {
	svc    *Service
	reveal func(echo.Context) bool // see RevealTo
}

// NewAPI returns the API of svc; rule changes reload svc's engine.
func NewAPI(svc *Service) *API { return &API{svc: svc} }

// RuleJSON is an alert rule on the wire: durations are Go duration strings
// ("30s", "2m").
type RuleJSON struct {
	ID         int64     `json:"id"`
	Name       string    `json:"name"`
	Service    string    `json:"service"`
	Breaker    string    `json:"breaker,omitempty"`
	Kind       string    `json:"kind"`
	For        string    `json:"for,omitempty"`
	Margin     float64   `json:"margin,omitempty"`
	Hold       string    `json:"hold,omitempty"`
	WebhookURL string    `json:"webhook_url"`
	Format     string    `json:"format,omitempty"`
	Disabled   bool      `json:"disabled,omitempty"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	Firing     []string  `json:"firing,omitempty"` // subjects firing now (responses only)
}

func toJSON(r cbdash.AlertRule, firing []string) RuleJSON {
	j := RuleJSON{ID: r.ID, Name: r.Name, Service: r.Service, Breaker: r.Breaker, Kind: r.Kind, Margin: r.Margin,
		WebhookURL: r.WebhookURL, Format: r.Format, Disabled: r.Disabled, CreatedAt: r.CreatedAt, Firing: firing}
	if r.For > 0 {
		j.For = r.For.String()
	}
	if r.Hold > 0 {
		j.Hold = r.Hold.String()
	}
	return j
}

func (j RuleJSON) rule() (cbdash.AlertRule, error) {
	r := cbdash.AlertRule{ID: j.ID, Name: j.Name, Service: j.Service, Breaker: j.Breaker, Kind: j.Kind, Margin: j.Margin,
		WebhookURL: j.WebhookURL, Format: j.Format, Disabled: j.Disabled}
	var err error
	if r.For, err = parseDuration("for", j.For); err != nil {
		return r, err
	}
	r.Hold, err = parseDuration("hold", j.Hold)
	return r, err
}

func parseDuration(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s must be a duration like 30s or 2m (got %q): %w", name, v, cbdash.ErrInvalid)
	}
	return d, nil
}

// Mount registers under /api/v1/alerts: GET rules, GET rules/:id, GET
// deliveries (?rule=ID&limit=N) and GET firing protected by read; POST rules, PUT
// rules/:id and DELETE rules/:id protected by operate. A nil middleware
// lets every request through. Errors are returned wrapped
// (cbdash.ErrNotFound, cbdash.ErrInvalid) for the server's error handler.
func (a *API) Mount(e *echo.Echo, read, operate echo.MiddlewareFunc) {
	read, operate = orPass(read), orPass(operate)
	e.GET("/api/v1/alerts/rules", a.list, read)
	e.GET("/api/v1/alerts/rules/:id", a.get, read)
	e.POST("/api/v1/alerts/rules", a.create, operate)
	e.PUT("/api/v1/alerts/rules/:id", a.update, operate)
	e.DELETE("/api/v1/alerts/rules/:id", a.remove, operate)
	e.GET("/api/v1/alerts/deliveries", a.deliveries, read)
	e.GET("/api/v1/alerts/firing", a.firing, read)
}

func orPass(m echo.MiddlewareFunc) echo.MiddlewareFunc {
	if m == nil {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return m
}

func idParam(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("alert rule %q: %w", c.Param("id"), cbdash.ErrNotFound)
	}
	return id, nil
}

func (a *API) list(c echo.Context) error {
	rules, err := a.svc.cfg.Store.AlertRules(c.Request().Context())
	if err != nil {
		return err
	}
	firing := a.svc.Firing()
	out := make([]RuleJSON, 0, len(rules))
	for _, r := range rules {
		out = append(out, a.ruleOut(c, r, firing[r.ID]))
	}
	return c.JSON(http.StatusOK, out)
}

func (a *API) get(c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	r, err := a.svc.cfg.Store.AlertRule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.ruleOut(c, r, a.svc.Firing()[r.ID]))
}

func bindRule(c echo.Context) (cbdash.AlertRule, error) {
	var j RuleJSON
	if err := c.Bind(&j); err != nil {
		return cbdash.AlertRule{}, fmt.Errorf("rule body: %v: %w", err, cbdash.ErrInvalid)
	}
	return j.rule()
}

func (a *API) create(c echo.Context) error {
	r, err := bindRule(c)
	if err != nil {
		return err
	}
	if err := a.checkIn(c.Request().Context(), &r, nil); err != nil {
		return err
	}
	r, err = a.svc.cfg.Store.CreateAlertRule(c.Request().Context(), r)
	if err != nil {
		return err
	}
	if err := a.svc.Reload(c.Request().Context()); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, a.ruleOut(c, r, nil))
}

func (a *API) update(c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	r, err := bindRule(c)
	if err != nil {
		return err
	}
	old, err := a.svc.cfg.Store.AlertRule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	r.ID, r.CreatedAt = id, old.CreatedAt
	if err := a.checkIn(c.Request().Context(), &r, &old); err != nil {
		return err
	}
	if err := a.svc.cfg.Store.UpdateAlertRule(c.Request().Context(), r); err != nil {
		return err
	}
	if err := a.svc.Reload(c.Request().Context()); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.ruleOut(c, r, nil))
}

func (a *API) remove(c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	if err := a.svc.cfg.Store.DeleteAlertRule(c.Request().Context(), id); err != nil {
		return err
	}
	if err := a.svc.Reload(c.Request().Context()); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (a *API) deliveries(c echo.Context) error {
	var q cbdash.DeliveryQuery
	if v := c.QueryParam("rule"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("rule must be a rule id: %w", cbdash.ErrInvalid)
		}
		q.RuleID = id
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10000 {
			return fmt.Errorf("limit must be within 0..10000: %w", cbdash.ErrInvalid)
		}
		q.Limit = n
	}
	ds, err := a.svc.cfg.Store.AlertDeliveries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []cbdash.AlertDelivery{}
	}
	return c.JSON(http.StatusOK, a.deliveriesOut(c, ds))
}
