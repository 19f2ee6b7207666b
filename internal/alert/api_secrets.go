package alert

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
)

// RevealTo sets who sees webhook URLs whole: the callers for which see
// returns true (the server passes its admin check); everyone else sees
// them masked (MaskURL), in rules and in the delivery log. Without it
// every caller sees them masked. It returns a, to chain with Mount.
func (a *API) RevealTo(see func(echo.Context) bool) *API {
	a.reveal = see
	return a
}

func (a *API) reveals(c echo.Context) bool { return a.reveal != nil && a.reveal(c) }

// ruleOut is r as the caller may see it.
func (a *API) ruleOut(c echo.Context, r cbdash.AlertRule, firing []string) RuleJSON {
	j := toJSON(r, firing)
	if !a.reveals(c) {
		j.WebhookURL = MaskURL(j.WebhookURL)
	}
	return j
}

// deliveriesOut is ds as the caller may see them.
func (a *API) deliveriesOut(c echo.Context, ds []cbdash.AlertDelivery) []cbdash.AlertDelivery {
	if a.reveals(c) {
		return ds
	}
	for i := range ds {
		ds[i].URL = MaskURL(ds[i].URL)
	}
	return ds
}

// checkIn checks a rule to be saved: its destination (CheckDestination);
// on an update (old not nil), a webhook URL sent back as it was shown
// masked keeps the stored one, so that a caller who cannot see the
// secret can still edit the rule's other fields.
func (a *API) checkIn(ctx context.Context, r *cbdash.AlertRule, old *cbdash.AlertRule) error {
	if old != nil && r.WebhookURL == MaskURL(old.WebhookURL) {
		r.WebhookURL = old.WebhookURL
		return nil
	}
	return CheckDestination(ctx, r.WebhookURL, a.svc.cfg.Delivery.AllowPrivate)
}
