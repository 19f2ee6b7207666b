package alert

import (
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
)

// SilenceRequest is a silence to create on the wire (the JSON API and
// the CLI): matchers, a reason, and its end as an RFC 3339 time (ends_at)
// or a Go duration from now (for, "2h"); exactly one of the two.
type SilenceRequest struct {
	Matchers cbdash.SilenceMatchers `json:"matchers"`
	Reason   string                 `json:"reason"`
	EndsAt   string                 `json:"ends_at,omitempty"`
	For      string                 `json:"for,omitempty"`
}

// Silence is r as a silence starting at now. A bad or missing end is an
// error wrapping cbdash.ErrInvalid naming the field; the rest is checked
// by the store (Service.CreateSilence).
func (r SilenceRequest) Silence(now time.Time) (cbdash.Silence, error) {
	sl := cbdash.Silence{Matchers: r.Matchers, Reason: r.Reason, StartsAt: now}
	switch {
	case (r.EndsAt == "") == (r.For == ""):
		return sl, fmt.Errorf("give the silence's end as ends_at (RFC 3339) or for (a duration like 2h), one of them: %w", cbdash.ErrInvalid)
	case r.EndsAt != "":
		end, err := time.Parse(time.RFC3339, r.EndsAt)
		if err != nil {
			return sl, fmt.Errorf("ends_at must be an RFC 3339 time (got %q): %w", r.EndsAt, cbdash.ErrInvalid)
		}
		sl.EndsAt = end
	default:
		d, err := ParseDuration("for", r.For)
		if err != nil || d <= 0 {
			return sl, fmt.Errorf("for must be a positive duration like 2h (got %q): %w", r.For, cbdash.ErrInvalid)
		}
		sl.EndsAt = now.Add(d)
	}
	return sl, nil
}

// AckRequest acknowledges the alert of a rule on a subject.
type AckRequest struct {
	RuleID  int64  `json:"rule_id"`
	Subject string `json:"subject"`
}
