package web

import (
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// driftTexts names, for each instance whose configuration differs from
// the one most live instances have, the settings that differ: "timeout 2s
// vs 1s on 3 others". Instances that agree with the majority, and every
// instance when all agree, are absent.
func driftTexts(d cbdash.Dependency) map[string]string {
	type group struct {
		cfg protocol.BreakerConfig
		n   int
	}
	var groups []*group
	for _, in := range d.PerInstance {
		if in.Stale {
			continue
		}
		found := false
		for _, g := range groups {
			if len(cbdash.ConfigDiff(*in.Config, g.cfg)) == 0 {
				g.n++
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, &group{cfg: *in.Config, n: 1})
		}
	}
	if len(groups) < 2 {
		return nil
	}
	major := groups[0]
	for _, g := range groups[1:] {
		if g.n > major.n {
			major = g
		}
	}
	out := map[string]string{}
	for _, in := range d.PerInstance {
		diffs := cbdash.ConfigDiff(*in.Config, major.cfg)
		if len(diffs) == 0 {
			continue
		}
		parts := make([]string, len(diffs))
		for i, df := range diffs {
			parts[i] = df.Setting + " " + df.Value + " vs " + df.Other
		}
		out[in.Instance] = strings.Join(parts, ", ") + " on " + plural(major.n, "other", "others")
	}
	return out
}
