package alert

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
)

// FiringJSON is an alert firing now on the wire.
type FiringJSON struct {
	RuleID  int64  `json:"rule_id"`
	Rule    string `json:"rule"` // the rule's name
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	// Since is when it started firing (RFC 3339); SinceMs the same in Unix
	// ms.
	Since   string `json:"since"`
	SinceMs int64  `json:"since_ms"`
	// For is how long it has been firing by the server's clock, to the
	// second ("3m12s").
	For    string `json:"for"`
	Detail string `json:"detail"`
}

// firing answers the alerts firing now, longest firing first.
func (a *API) firing(c echo.Context) error {
	rules, err := a.svc.cfg.Store.AlertRules(c.Request().Context())
	if err != nil {
		return err
	}
	byID := make(map[int64]cbdash.AlertRule, len(rules))
	for _, r := range rules {
		byID[r.ID] = r
	}
	out := []FiringJSON{}
	now := a.svc.cfg.Clock.Now()
	for _, f := range a.svc.Alerts() {
		r := byID[f.RuleID]
		out = append(out, FiringJSON{RuleID: f.RuleID, Rule: r.Name, Kind: r.Kind, Subject: f.Subject,
			Since: f.Since.UTC().Format("2006-01-02T15:04:05.000Z07:00"), SinceMs: f.Since.UnixMilli(),
			For: now.Sub(f.Since).Truncate(time.Second).String(), Detail: f.Detail})
	}
	return c.JSON(http.StatusOK, out)
}
