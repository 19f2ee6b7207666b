package alert

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// RuleJSON is an alert rule on the wire (the JSON API and the CLI):
// durations are Go duration strings ("30s", "2m"), or whole days ("30d").
type RuleJSON struct {
	ID         int64   `json:"id"`
	Name       string  `json:"name"`
	Service    string  `json:"service"`
	Breaker    string  `json:"breaker,omitempty"`
	Kind       string  `json:"kind"`
	For        string  `json:"for,omitempty"`
	Margin     float64 `json:"margin,omitempty"`
	Hold       string  `json:"hold,omitempty"`
	WebhookURL string  `json:"webhook_url"`
	Format     string  `json:"format,omitempty"`
	// FlapCount opens (0 = 5) within FlapWindow (a duration, "" = 10m)
	// is flapping; GroupBy ("breaker", "service" or "") batches the
	// rule's notifications, GroupWait and GroupInterval are durations
	// ("" = 10s, 1m). See cbdash.AlertRule.
	FlapCount     int       `json:"flap_count,omitempty"`
	FlapWindow    string    `json:"flap_window,omitempty"`
	GroupBy       string    `json:"group_by,omitempty"`
	GroupWait     string    `json:"group_wait,omitempty"`
	GroupInterval string    `json:"group_interval,omitempty"`
	Disabled      bool      `json:"disabled,omitempty"`
	CreatedAt     time.Time `json:"created_at,omitzero"`
	Firing        []string  `json:"firing,omitempty"` // subjects firing now (responses only)
}

// RuleOut is r on the wire with the subjects firing now; unless reveal
// (the caller is an admin), its webhook URL is masked (ShowURL).
func RuleOut(r cbdash.AlertRule, firing []string, reveal bool) RuleJSON {
	j := RuleJSON{ID: r.ID, Name: r.Name, Service: r.Service, Breaker: r.Breaker, Kind: r.Kind, Margin: r.Margin,
		WebhookURL: ShowURL(r.WebhookURL, reveal), Format: r.Format, Disabled: r.Disabled, CreatedAt: r.CreatedAt, Firing: firing,
		FlapCount: r.FlapCount, GroupBy: r.GroupBy}
	j.FlapWindow, j.GroupWait, j.GroupInterval = durationText(r.FlapWindow), durationText(r.GroupWait), durationText(r.GroupInterval)
	j.For = DurationText(r.For)
	if r.Hold > 0 {
		j.Hold = r.Hold.String()
	}
	return j
}

// Rule is j as a rule to save. A bad duration is an error wrapping
// cbdash.ErrInvalid naming the field; the rest is checked by CreateRule
// and UpdateRule.
func (j RuleJSON) Rule() (cbdash.AlertRule, error) {
	r := cbdash.AlertRule{ID: j.ID, Name: j.Name, Service: j.Service, Breaker: j.Breaker, Kind: j.Kind, Margin: j.Margin,
		WebhookURL: j.WebhookURL, Format: j.Format, Disabled: j.Disabled, FlapCount: j.FlapCount, GroupBy: j.GroupBy}
	for _, d := range []struct {
		name, v string
		to      *time.Duration
	}{{"for", j.For, &r.For}, {"hold", j.Hold, &r.Hold}, {"flap_window", j.FlapWindow, &r.FlapWindow},
		{"group_wait", j.GroupWait, &r.GroupWait}, {"group_interval", j.GroupInterval, &r.GroupInterval}} {
		var err error
		if *d.to, err = ParseDuration(d.name, d.v); err != nil {
			return r, err
		}
	}
	return r, nil
}

// DurationText is d as the rules read it: whole days as "30d", else
// durationText.
func DurationText(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return durationText(d)
}

// durationText is d as a Go duration string, "" for 0.
func durationText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// ParseDuration reads a rule's duration field name: a Go duration ("30s",
// "2m") or whole days ("30d"); "" is 0. Errors wrap cbdash.ErrInvalid and
// name the field.
func ParseDuration(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if n, ok := strings.CutSuffix(v, "d"); ok { // whole days: "30d"
		var days int64
		days, err = strconv.ParseInt(n, 10, 32)
		d = time.Duration(days) * 24 * time.Hour
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s must be a duration like 30s, 2m or 30d (got %q): %w", name, v, cbdash.ErrInvalid)
	}
	return d, nil
}

// DeliveriesOut is ds as a caller may see them: unless reveal (the caller
// is an admin), webhook URLs masked (ShowURL). It changes ds in place.
func DeliveriesOut(ds []cbdash.AlertDelivery, reveal bool) []cbdash.AlertDelivery {
	for i := range ds {
		ds[i].URL = ShowURL(ds[i].URL, reveal)
	}
	return ds
}

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
	// AckedBy and AckedAt (RFC 3339) say who acknowledged it and when;
	// absent when nobody did.
	AckedBy string `json:"acked_by,omitempty"`
	AckedAt string `json:"acked_at,omitempty"`
	// Silenced is the ID of the silence holding its notifications back
	// now (absent: none).
	Silenced int64 `json:"silenced,omitempty"`
}

// FiringOut is the alerts firing now (as Service.Alerts gives them,
// longest firing first) on the wire, named after their rules, with how
// long each has been firing at now.
func FiringOut(rules []cbdash.AlertRule, alerts []cbdash.FiringAlert, now time.Time) []FiringJSON {
	byID := make(map[int64]cbdash.AlertRule, len(rules))
	for _, r := range rules {
		byID[r.ID] = r
	}
	out := []FiringJSON{}
	for _, f := range alerts {
		r := byID[f.RuleID]
		out = append(out, FiringJSON{RuleID: f.RuleID, Rule: r.Name, Kind: r.Kind, Subject: f.Subject,
			Since: f.Since.UTC().Format("2006-01-02T15:04:05.000Z07:00"), SinceMs: f.Since.UnixMilli(),
			For: now.Sub(f.Since).Truncate(time.Second).String(), Detail: f.Detail, AckedBy: f.AckedBy})
		if !f.AckedAt.IsZero() {
			out[len(out)-1].AckedAt = f.AckedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		}
	}
	return out
}

// MarkSilenced sets, on each alert of out, the silence of sls active at
// now that matches its subject and labels: out[i] is alerts[i] on the
// wire (FiringOut), whose Labels silences with label matchers match.
func MarkSilenced(out []FiringJSON, alerts []cbdash.FiringAlert, sls []cbdash.Silence, now time.Time) {
	for i := range out {
		var labels map[string]string
		if i < len(alerts) && alerts[i].Subject == out[i].Subject {
			labels = alerts[i].Labels
		}
		if sl, ok := SilenceOf(out[i].Subject, labels, sls, now); ok {
			out[i].Silenced = sl.ID
		}
	}
}

// SilenceOf returns the silence of sls active at now that matches subject
// with its dependency's labels, the first listed when several do.
func SilenceOf(subject string, labels map[string]string, sls []cbdash.Silence, now time.Time) (cbdash.Silence, bool) {
	for _, sl := range sls {
		if sl.Active(now) && sl.Matchers.Match(subject, labels) {
			return sl, true
		}
	}
	return cbdash.Silence{}, false
}
