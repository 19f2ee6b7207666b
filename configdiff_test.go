package cbdash_test

import (
	"reflect"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestConfigDiffNamesEverySettingThatDiffers(t *testing.T) {
	base := protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50, MinimumCalls: 5,
		OpenDurationMillis: 10000, HalfOpenMaxCalls: 3, HalfOpenSuccessThreshold: 2, CallTimeoutMillis: 1000, MaxConcurrent: 10}
	tests := []struct {
		name   string
		change func(*protocol.BreakerConfig)
		want   []cbdash.SettingDiff
	}{
		{"same", func(*protocol.BreakerConfig) {}, nil},
		{"name only", func(c *protocol.BreakerConfig) { c.Name = "other" }, nil},
		{"timeout", func(c *protocol.BreakerConfig) { c.CallTimeoutMillis = 2000 }, []cbdash.SettingDiff{{"timeout", "2s", "1s"}}},
		{"bulkhead", func(c *protocol.BreakerConfig) { c.MaxConcurrent = 0 }, []cbdash.SettingDiff{{"bulkhead", "0", "10"}}},
		{"ramp", func(c *protocol.BreakerConfig) { c.RampMillis = 20000 }, []cbdash.SettingDiff{{"ramp", "20s", "0s"}}},
		{"half-open", func(c *protocol.BreakerConfig) { c.HalfOpenMaxCalls = 1 }, []cbdash.SettingDiff{{"half-open max calls", "1", "3"}}},
		{"back-off", func(c *protocol.BreakerConfig) { c.OpenBackoffMultiplier, c.OpenBackoffMaxMillis = 2, 60000 },
			[]cbdash.SettingDiff{{"open back-off multiplier", "2", "0"}, {"open back-off max", "1m0s", "0s"}}},
		{"shadows", func(c *protocol.BreakerConfig) {
			c.Shadows = protocol.NewShadows([]protocol.BreakerConfig{{Name: "tight", WindowKind: "count", WindowSize: 20, FailureRateThreshold: 30}})
		}, []cbdash.SettingDiff{{"shadows", "tight 30%", "none"}}},
		{"library setting", func(c *protocol.BreakerConfig) {
			c.Library, c.Settings = "sony/gobreaker v2", protocol.NewSettings(map[string]string{"MaxRequests": "3"})
		}, []cbdash.SettingDiff{{"library", "sony/gobreaker v2", ""}, {"MaxRequests", "3", "unset"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.change(&c)
			if got := cbdash.ConfigDiff(c, base); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ConfigDiff = %+v, want %+v", got, tt.want)
			}
		})
	}
}
