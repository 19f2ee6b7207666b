package alert_test

import (
	"testing"

	"github.com/cbdash/cbdash/internal/alert"
)

func TestMaskURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXX": "https://hooks.slack.com/services/T…/…",
		"https://example.com/hook?token=s3cret":           "https://example.com/hook?…",
		"https://user:pw@example.com:8443/a/bcd":          "https://example.com:8443/a/b…",
		"https://example.com":                             "https://example.com",
		"not a url":                                       "…",
		"":                                                "…",
	} {
		if got := alert.MaskURL(raw); got != want {
			t.Errorf("MaskURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
