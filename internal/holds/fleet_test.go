package holds

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// elsewhere is what other collectors serve, in memory.
type elsewhere struct {
	insts []Instance
	parts []Part
}

func (e elsewhere) InstancesElsewhere(context.Context) ([]Instance, error) { return e.insts, nil }
func (e elsewhere) PartsElsewhere() []Part                                 { return e.parts }

// Pre-flight counts another collector's part of a dependency (its
// members' last windows summed) when the selector covers every member:
// the dependency, or labels every member has; never when it names
// instances, takes a share, or asks for a label not every member has
// (nothing is known here of one member's window).
func TestPreflightCountsAPartElsewhereOnlyWhenTheSelectorCoversItWhole(t *testing.T) {
	m, _, _ := newTestManager(t)
	m.cfg.Elsewhere = elsewhere{parts: []Part{{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "db"}, Instances: 2,
		Labels: map[string]string{"region": "eu"}, Last: protocol.Counts{Admitted: 20, Failures: 15, Errors: 15}}}}
	stop := cbdash.StopCondition{Metric: cbdash.StopErrorRate, Above: 40}
	for _, tc := range []struct {
		name     string
		sel      cbdash.Selector
		breached bool
	}{
		{"the dependency", cbdash.Selector{Service: "checkout", Breaker: "db"}, true},
		{"every service's db", cbdash.Selector{Service: cbdash.AnyService, Breaker: "db"}, true},
		{"a label every member has", cbdash.Selector{Service: "checkout", Breaker: "db", Labels: map[string]string{"region": "eu"}}, true},
		{"a label not every member has", cbdash.Selector{Service: "checkout", Breaker: "db", Labels: map[string]string{"zone": "a"}}, false},
		{"named instances", cbdash.Selector{Service: "checkout", Breaker: "db", Instances: []string{"c1"}}, false},
		{"a share", cbdash.Selector{Service: "checkout", Breaker: "db", Share: 50}, false},
		{"another breaker", cbdash.Selector{Service: "checkout", Breaker: "cache"}, false},
	} {
		req := cbdash.HoldRequest{Selector: tc.sel, Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", StopIf: []cbdash.StopCondition{stop}}
		reasons, err := m.Preflight(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(reasons) > 0; got != tc.breached {
			t.Errorf("%s: refused %v (%q), want %v", tc.name, got, reasons, tc.breached)
		}
	}
}
