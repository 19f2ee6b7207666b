package cbdash

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// SettingDiff is one setting of a breaker configuration that differs from
// another configuration: its name in the dashboard's words and both
// values in their units ("timeout", "2s", "1s").
type SettingDiff struct {
	Setting string
	Value   string // this configuration's
	Other   string // the other configuration's
}

// ConfigDiff names every setting of c that differs from other, in a fixed
// order: window, thresholds, minimum calls, open duration and back-off,
// half-open, timeout, bulkhead, ramp, library, holds, shadow
// configurations, then each library setting by name. It compares every field of protocol.BreakerConfig but the name;
// equal configurations give nil.
func ConfigDiff(c, other protocol.BreakerConfig) []SettingDiff {
	var out []SettingDiff
	add := func(name, a, b string) {
		if a != b {
			out = append(out, SettingDiff{name, a, b})
		}
	}
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	pct := func(v float64) string { return num(v) + "%" }
	add("window kind", c.WindowKind, other.WindowKind)
	add("window size", strconv.Itoa(c.WindowSize)+" calls", strconv.Itoa(other.WindowSize)+" calls")
	add("window length", ms(c.WindowMillis), ms(other.WindowMillis))
	add("window buckets", strconv.Itoa(c.WindowBuckets), strconv.Itoa(other.WindowBuckets))
	add("failure-rate threshold", pct(c.FailureRateThreshold), pct(other.FailureRateThreshold))
	add("slow-call duration", ms(c.SlowCallDurationMillis), ms(other.SlowCallDurationMillis))
	add("slow-call rate threshold", pct(c.SlowCallRateThreshold), pct(other.SlowCallRateThreshold))
	add("minimum calls", strconv.Itoa(c.MinimumCalls), strconv.Itoa(other.MinimumCalls))
	add("open duration", ms(c.OpenDurationMillis), ms(other.OpenDurationMillis))
	add("open back-off multiplier", num(c.OpenBackoffMultiplier), num(other.OpenBackoffMultiplier))
	add("open back-off max", ms(c.OpenBackoffMaxMillis), ms(other.OpenBackoffMaxMillis))
	add("half-open max calls", strconv.Itoa(c.HalfOpenMaxCalls), strconv.Itoa(other.HalfOpenMaxCalls))
	add("half-open successes to close", strconv.Itoa(c.HalfOpenSuccessThreshold), strconv.Itoa(other.HalfOpenSuccessThreshold))
	add("timeout", ms(c.CallTimeoutMillis), ms(other.CallTimeoutMillis))
	add("bulkhead", strconv.Itoa(c.MaxConcurrent), strconv.Itoa(other.MaxConcurrent))
	add("ramp", ms(c.RampMillis), ms(other.RampMillis))
	add("library", c.Library, other.Library)
	add("holds", fmt.Sprint(!c.HoldsUnsupported), fmt.Sprint(!other.HoldsUnsupported))
	if c.Shadows != other.Shadows {
		out = append(out, SettingDiff{"shadows", shadowsText(c.Shadows), shadowsText(other.Shadows)})
	}
	a, b := c.Settings.Map(), other.Settings.Map()
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		va, ok := a[k]
		if !ok {
			va = "unset"
		}
		vb, ok := b[k]
		if !ok {
			vb = "unset"
		}
		add(k, va, vb)
	}
	return out
}

// shadowsText names the shadow configurations of s with their failure-rate
// thresholds ("tight 30%, loose 70%"); "none" when there are none.
func shadowsText(s protocol.Shadows) string {
	l := s.List()
	if len(l) == 0 {
		return "none"
	}
	parts := make([]string, len(l))
	for i, c := range l {
		parts[i] = c.Name + " " + strconv.FormatFloat(c.FailureRateThreshold, 'f', -1, 64) + "%"
	}
	return strings.Join(parts, ", ")
}
