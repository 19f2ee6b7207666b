package alert_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

var t0 = clocktest.Epoch()

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

var payments = cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}

// dep builds a dependency of checkout/payments whose instances are in the
// given states ("a:open", "b:closed", "c:stale").
func dep(k cbdash.DependencyKey, states ...string) cbdash.Dependency {
	d := cbdash.Dependency{DependencyKey: k, ByState: map[string]int{}}
	for _, s := range states {
		inst, st, _ := strings.Cut(s, ":")
		ib := cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: inst, State: st, LastTransition: t0, LastSeen: t0}
		if st == "stale" {
			ib.State, ib.Stale = protocol.StateClosed, true
			d.Stale++
		} else {
			d.ByState[st]++
			d.Instances++
		}
		d.PerInstance = append(d.PerInstance, &ib)
	}
	return d
}

func depEvent(sec int, d cbdash.Dependency) cbdash.Event {
	return cbdash.Event{Kind: cbdash.EventDependency, At: at(sec), Dependency: &d}
}

func describe(ns []alert.Notification) []string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%s %d %s", n.Event, n.Rule.ID, n.Subject))
	}
	return out
}

func TestEngine(t *testing.T) {
	headroom := func(rate float64) cbdash.Dependency {
		d := dep(payments, "a:closed")
		d.Headroom = protocol.Headroom{Calls: 20, MinimumCalls: 10, FailureRate: rate, FailureRateThreshold: 50}
		return d
	}
	type step struct {
		sec  int
		dep  *cbdash.Dependency
		open bool // a transition to open on instance a
		// stopped: a stop condition ended a drill on */payments that
		// covered checkout's
		stopped bool
		want    []string
	}
	ptr := func(d cbdash.Dependency) *cbdash.Dependency { return &d }
	tests := []struct {
		name  string
		rule  cbdash.AlertRule
		steps []step
	}{
		{
			name: "a breaker flapping every few seconds sends one alert and one resolve",
			rule: cbdash.AlertRule{ID: 1, Service: "checkout", Kind: cbdash.AlertOpen, Hold: 30 * time.Second},
			steps: []step{
				{sec: 0, dep: ptr(dep(payments, "a:closed", "b:closed"))},
				{sec: 1, dep: ptr(dep(payments, "a:open", "b:closed")), want: []string{"firing 1 checkout/payments"}},
				{sec: 4, dep: ptr(dep(payments, "a:closed", "b:closed"))},
				{sec: 7, dep: ptr(dep(payments, "a:open", "b:closed"))},
				{sec: 10, dep: ptr(dep(payments, "a:half_open", "b:closed"))},
				{sec: 13, dep: ptr(dep(payments, "a:closed", "b:open"))},
				{sec: 16, dep: ptr(dep(payments, "a:closed", "b:closed"))},
				{sec: 19, dep: ptr(dep(payments, "a:open", "b:closed"))},
				{sec: 22, dep: ptr(dep(payments, "a:closed", "b:closed"))},
				{sec: 48},
				{sec: 49, want: []string{"resolved 1 checkout/payments"}},
				{sec: 80},
			},
		},
		{
			name: "an open shorter than the evaluation interval still fires",
			rule: cbdash.AlertRule{ID: 2, Service: "checkout", Breaker: "payments", Kind: cbdash.AlertOpen, Hold: 10 * time.Second},
			steps: []step{
				{sec: 0, dep: ptr(dep(payments, "a:closed"))},
				{sec: 1, open: true, want: []string{"firing 2 checkout/payments"}},
				{sec: 12, want: []string{"resolved 2 checkout/payments"}},
			},
		},
		{
			name: "a rule for another breaker stays silent",
			rule: cbdash.AlertRule{ID: 3, Service: "checkout", Breaker: "inventory", Kind: cbdash.AlertOpen},
			steps: []step{
				{sec: 1, dep: ptr(dep(payments, "a:open"))},
				{sec: 2, open: true},
			},
		},
		{
			name: "forced open is an operator action, not an alert",
			rule: cbdash.AlertRule{ID: 4, Service: "checkout", Kind: cbdash.AlertOpen},
			steps: []step{
				{sec: 1, dep: ptr(dep(payments, "a:forced_open"))},
			},
		},
		{
			name: "half-open lasting longer than For fires",
			rule: cbdash.AlertRule{ID: 5, Service: "checkout", Kind: cbdash.AlertHalfOpenLong, For: 20 * time.Second, Hold: 5 * time.Second},
			steps: []step{
				{sec: 0, dep: ptr(dep(payments, "a:half_open"))},
				{sec: 19},
				{sec: 20, want: []string{"firing 5 checkout/payments"}},
				{sec: 21, dep: ptr(dep(payments, "a:closed"))},
				{sec: 26, want: []string{"resolved 5 checkout/payments"}},
			},
		},
		{
			name: "headroom below the margin fires before the breaker trips",
			rule: cbdash.AlertRule{ID: 6, Service: "checkout", Kind: cbdash.AlertHeadroom, Margin: 10, Hold: 5 * time.Second},
			steps: []step{
				{sec: 0, dep: ptr(headroom(30))},
				{sec: 1, dep: ptr(headroom(39.9))},
				{sec: 2, dep: ptr(headroom(40)), want: []string{"firing 6 checkout/payments"}},
				{sec: 3, dep: ptr(headroom(45))},
				{sec: 4, dep: ptr(headroom(20))},
				{sec: 10, want: []string{"resolved 6 checkout/payments"}},
			},
		},
		{
			name: "headroom is not judged below the minimum calls",
			rule: cbdash.AlertRule{ID: 7, Service: "checkout", Kind: cbdash.AlertHeadroom},
			steps: []step{
				{sec: 0, dep: func() *cbdash.Dependency {
					d := headroom(90)
					d.Headroom.Calls = 5
					return &d
				}()},
			},
		},
		{
			name: "a stale instance fires per instance and resolves when it is back",
			rule: cbdash.AlertRule{ID: 8, Service: "checkout", Kind: cbdash.AlertStale, Hold: time.Second},
			steps: []step{
				{sec: 0, dep: ptr(dep(payments, "a:closed", "b:stale")), want: []string{"firing 8 checkout@b"}},
				{sec: 5, dep: ptr(dep(payments, "a:closed", "b:closed")), want: []string{"resolved 8 checkout@b"}},
			},
		},
		{
			name: "a drill a stop condition ended fires once for each dependency it covered, and resolves after the hold",
			rule: cbdash.AlertRule{ID: 9, Service: "checkout", Kind: cbdash.AlertDrillStopped, Hold: 10 * time.Second},
			steps: []step{
				{sec: 0, dep: ptr(dep(payments, "a:forced_open"))},
				{sec: 1, stopped: true, want: []string{"firing 9 checkout/payments"}},
				{sec: 30},
				{sec: 60},
				{sec: 61}, // a minute after the stop: no longer true
				{sec: 70, want: []string{"resolved 9 checkout/payments"}}, // the hold after it was last true
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := alert.NewEngine()
			e.SetRules([]cbdash.AlertRule{tt.rule})
			for _, s := range tt.steps {
				if s.dep != nil {
					e.Observe(depEvent(s.sec, *s.dep))
				}
				if s.stopped {
					e.Observe(cbdash.Event{Kind: cbdash.EventDrillStopped, At: at(s.sec), Hold: &cbdash.HoldRecord{ID: "h1",
						HoldRequest:   cbdash.HoldRequest{Selector: cbdash.Selector{Service: "*", Breaker: "payments"}},
						ReleaseReason: "stop condition: fallback failure rate 86 % > 20 % at 15:02:57",
						Coverage:      []cbdash.HoldCoverage{{Service: "checkout", Instance: "a", Breaker: "payments"}}}})
				}
				if s.open {
					e.Observe(cbdash.Event{Kind: cbdash.EventTransition, At: at(s.sec), Transition: &cbdash.TransitionRecord{
						Service: "checkout", Instance: "a", Transition: protocol.Transition{Breaker: "payments", From: "closed", To: "open"}}})
				}
				got := describe(e.Evaluate(at(s.sec)))
				if strings.Join(got, ";") != strings.Join(s.want, ";") {
					t.Fatalf("at %ds: got %q, want %q", s.sec, got, s.want)
				}
			}
		})
	}
}

func TestEngineSetRules(t *testing.T) {
	t.Run("removing a rule forgets its alerts without a resolve", func(t *testing.T) {
		e := alert.NewEngine()
		e.SetRules([]cbdash.AlertRule{{ID: 1, Service: "checkout", Kind: cbdash.AlertOpen}})
		e.Observe(depEvent(0, dep(payments, "a:open")))
		if got := describe(e.Evaluate(at(0))); len(got) != 1 {
			t.Fatalf("got %v", got)
		}
		e.SetRules(nil)
		if got := e.Evaluate(at(1000)); len(got) != 0 {
			t.Fatalf("got %v after the rule was removed", describe(got))
		}
	})
	t.Run("keeping a rule keeps its firing alert", func(t *testing.T) {
		e := alert.NewEngine()
		r := cbdash.AlertRule{ID: 1, Service: "checkout", Kind: cbdash.AlertOpen}
		e.SetRules([]cbdash.AlertRule{r})
		e.Observe(depEvent(0, dep(payments, "a:open")))
		e.Evaluate(at(0))
		r.Name = "renamed"
		e.SetRules([]cbdash.AlertRule{r})
		if got := e.Evaluate(at(1)); len(got) != 0 {
			t.Fatalf("fired again after a rename: %v", describe(got))
		}
		if f := e.Firing(); len(f[1]) != 1 {
			t.Fatalf("Firing() = %v", f)
		}
	})
}
