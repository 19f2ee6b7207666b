package alert_test

import (
	"testing"

	"github.com/cbdash/cbdash/internal/alert"
)

// Any part of a webhook URL after the host may be its secret: masked, only
// the scheme and the host (with its port) are left (issue 27, item 6).
func TestMaskURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXX": "https://hooks.slack.com/…",
		"http://hooks.example/T0KEN":                      "http://hooks.example/…",
		"http://hooks.example/T0KEN/":                     "http://hooks.example/…",
		"https://example.com/hook?token=s3cret":           "https://example.com/…",
		"https://example.com?token=s3cret":                "https://example.com/…",
		"https://user:pw@example.com:8443/a/bcd":          "https://example.com:8443/…",
		"https://user:pw@example.com":                     "https://example.com/…",
		"https://example.com/#s3cret":                     "https://example.com/…",
		"https://[2001:db8::1]:8443/T0KEN":                "https://[2001:db8::1]:8443/…",
		"https://example.com":                             "https://example.com/…",
		"not a url":                                       "…",
		"/T0KEN":                                          "…",
		"":                                                "…",
	} {
		if got := alert.MaskURL(raw); got != want {
			t.Errorf("MaskURL(%q) = %q, want %q", raw, got, want)
		}
		if got := alert.ShowURL(raw, false); got != want {
			t.Errorf("ShowURL(%q, false) = %q, want %q", raw, got, want)
		}
		if got := alert.ShowURL(raw, true); got != raw {
			t.Errorf("ShowURL(%q, true) = %q, want it whole", raw, got)
		}
	}
}
