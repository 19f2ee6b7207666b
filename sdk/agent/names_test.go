package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// The agent refuses, at New and at Register, a name the collector would
// refuse in its hello: one with an invisible format character (a zero
// width space makes "payments" and "pay\u200bments" two dependencies that
// look the same), saying which field, which character and where.
func TestTheAgentRefusesNamesTheCollectorRefuses(t *testing.T) {
	const zws = "pay\u200bments" // U+200B at byte 3
	const want = "contains the invisible format character U+200B at byte 3"
	ok := agent.Config{URL: "ws://127.0.0.1:1/api/v1/agent", Service: "checkout", Instance: "checkout-1"}
	for _, tc := range []struct {
		field  string
		mutate func(*agent.Config)
	}{
		{"Service", func(c *agent.Config) { c.Service = zws }},
		{"Instance", func(c *agent.Config) { c.Instance = zws }},
		{`Labels: key "pay`, func(c *agent.Config) { c.Labels = map[string]string{zws: "x"} }},
		{`Labels["team"]`, func(c *agent.Config) { c.Labels = map[string]string{"team": "pay\ufeffments"} }},
		{`Labels["team"] is required`, func(c *agent.Config) { c.Labels = map[string]string{"team": " "} }},
		{"contains a slash", func(c *agent.Config) { c.Service = "shop/checkout" }},
	} {
		c := ok
		tc.mutate(&c)
		_, err := agent.New(c)
		if !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New with a bad %s: %v, want ErrInvalidConfig naming it", tc.field, err)
		}
		if strings.Contains(tc.field, "Service") || tc.field == "Instance" {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("New with %s %q: %v, want %q", tc.field, zws, err, want)
			}
		}
	}

	f := newFixture(t, fixtureOptions{noStart: true})
	b, err := breaker.New(zws, breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Register(b); !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), "breaker name "+want) {
		t.Errorf("Register of a breaker named %q: %v, want ErrInvalidConfig saying %q", zws, err, want)
	}
	if err := f.agent.RegisterSource(&foreign{Meter: adapter.NewMeter("pay\u2060ments", nil)}); !errors.Is(err, agent.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "U+2060 at byte 3") {
		t.Errorf("RegisterSource of a breaker named with a word joiner: %v", err)
	}
	good, err := breaker.New("refunds", breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Register(good); err != nil {
		t.Errorf("Register of a plain name: %v", err)
	}
}
