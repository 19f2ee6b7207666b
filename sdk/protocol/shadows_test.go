package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

func shadowConfig(name string, threshold float64) protocol.BreakerConfig {
	return protocol.BreakerConfig{Name: name, WindowKind: "count", WindowSize: 100, FailureRateThreshold: threshold,
		MinimumCalls: 20, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}
}

func TestHelloShadowsValidate(t *testing.T) {
	for _, c := range []struct {
		name    string
		shadows []protocol.BreakerConfig
		want    string
	}{
		{"none", nil, ""},
		{"two", []protocol.BreakerConfig{shadowConfig("tight", 30), shadowConfig("loose", 70)}, ""},
		{"four", []protocol.BreakerConfig{shadowConfig("a", 1), shadowConfig("b", 1), shadowConfig("c", 1), shadowConfig("d", 1)}, "breakers[0].shadows has 4 entries (at most 3)"},
		{"unnamed", []protocol.BreakerConfig{shadowConfig("", 30)}, "breakers[0].shadows[0].name"},
		{"twice", []protocol.BreakerConfig{shadowConfig("a", 30), shadowConfig("a", 40)}, `breakers[0].shadows[1].name "a" is used twice`},
		{"bad threshold", []protocol.BreakerConfig{shadowConfig("a", 130)}, "breakers[0].shadows[0].failure_rate_threshold"},
		{"library", []protocol.BreakerConfig{{Name: "a", WindowKind: "count", Library: "x"}}, "a shadow has no library, settings or shadows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := validHello()
			h.Breakers[0].Shadows = protocol.NewShadows(c.shadows)
			checkErr(t, h.Validate(), c.want)
		})
	}
}

// Shadows keep BreakerConfig comparable and round-trip through JSON.
func TestShadowsRoundTripAndCompare(t *testing.T) {
	a := validHello().Breakers[0]
	a.Shadows = protocol.NewShadows([]protocol.BreakerConfig{shadowConfig("tight", 30)})
	data, err := json.Marshal(a)
	if err != nil || !strings.Contains(string(data), `"shadows":[{"name":"tight"`) {
		t.Fatalf("%s, %v", data, err)
	}
	var b protocol.BreakerConfig
	if err := json.Unmarshal(data, &b); err != nil || b != a || b.Shadows.List()[0].FailureRateThreshold != 30 {
		t.Fatalf("round trip: %+v, %v", b, err)
	}
	plain := validHello().Breakers[0]
	if data, _ := json.Marshal(plain); strings.Contains(string(data), "shadows") {
		t.Fatalf("a breaker without shadows says shadows: %s", data)
	}
	if plain == a {
		t.Fatal("a breaker with shadows equals one without")
	}
}

func TestBatchShadowTransitionsValidate(t *testing.T) {
	h := validHello()
	shadow := func() protocol.Transition {
		tr := validBatch().Transitions[0]
		tr.Shadow = "tight"
		return tr
	}
	for _, c := range []struct {
		name string
		mod  func(b *protocol.Batch)
		want string
	}{
		{"shadow", func(b *protocol.Batch) { b.ShadowTransitions = []protocol.Transition{shadow()} }, ""},
		{"unnamed", func(b *protocol.Batch) {
			tr := shadow()
			tr.Shadow = ""
			b.ShadowTransitions = []protocol.Transition{tr}
		}, "shadow_transitions[0].shadow"},
		{"undeclared breaker", func(b *protocol.Batch) {
			tr := shadow()
			tr.Breaker = "nope"
			b.ShadowTransitions = []protocol.Transition{tr}
		}, `shadow_transitions[0].breaker "nope" was not declared`},
		{"shadow among the live", func(b *protocol.Batch) { b.Transitions = []protocol.Transition{shadow()} }, "transitions[0].shadow is set"},
		{"bad state", func(b *protocol.Batch) {
			tr := shadow()
			tr.To = "ajar"
			b.ShadowTransitions = []protocol.Transition{tr}
		}, "shadow_transitions[0]: unknown state"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := validBatch()
			c.mod(&b)
			checkErr(t, b.Validate(&h, now), c.want)
		})
	}
}
