package incident_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// t0 is noon of the test epoch's day (the golden report prints times of
// day).
var t0 = clocktest.Noon()

// step is one input to the detector, at second `at` after t0: a
// transition ("inst:to"), a dependency event (live instances, stale ones)
// or a clock tick.
type step struct {
	at    int
	tr    string
	live  int
	stale []string
	tick  bool
	// remote: instances the dependency event counts in live but has no
	// line of (served by another collector, internal/live issue 36).
	remote []string
}

func tr(at int, s string) step { return step{at: at, tr: s} }

// apply gives the step to d (a tick, or its event) and returns the changes.
func (s step) apply(d *incident.Detector, prev map[string]string) []incident.Change {
	if s.tick {
		return d.Tick(t0.Add(time.Duration(s.at) * time.Second))
	}
	return d.Observe(s.event(prev))
}
func tick(at int) step { return step{at: at, tick: true} }

var key = cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}

func (s step) event(prev map[string]string) cbdash.Event {
	at := t0.Add(time.Duration(s.at) * time.Second)
	if s.tr != "" {
		inst, to, _ := strings.Cut(s.tr, ":")
		from := prev[inst]
		if from == "" {
			from = protocol.StateClosed
		}
		prev[inst] = to
		cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
		switch to {
		case protocol.StateHalfOpen:
			cause = protocol.Cause{Kind: protocol.CauseOpenElapsed}
		case protocol.StateClosed:
			cause = protocol.Cause{Kind: protocol.CauseProbesSucceeded}
		case protocol.StateForcedOpen:
			cause = protocol.Cause{Kind: protocol.CauseCommand, Action: protocol.ActionForceOpen}
		}
		return cbdash.Event{Kind: cbdash.EventTransition, At: at, Transition: &cbdash.TransitionRecord{
			Service: key.Service, Instance: inst,
			Transition: protocol.Transition{Breaker: key.Breaker, From: from, To: to, At: at.UnixMilli(), Cause: cause},
		}}
	}
	dep := cbdash.Dependency{DependencyKey: key, Instances: s.live}
	stale := map[string]bool{}
	for _, n := range s.stale {
		stale[n] = true
	}
	for inst, st := range prev {
		if slices.Contains(s.remote, inst) {
			continue
		}
		dep.PerInstance = append(dep.PerInstance, &cbdash.InstanceBreaker{Service: key.Service, Breaker: key.Breaker, Instance: inst, State: st, Stale: stale[inst]})
	}
	return cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &dep}
}

func describe(c incident.Change) string {
	i := c.Incident
	s := fmt.Sprintf("%s start=%d", c.Kind, int(i.Start.Sub(t0)/time.Second))
	if !i.End.IsZero() {
		s += fmt.Sprintf(" end=%d", int(i.End.Sub(t0)/time.Second))
	}
	return s + fmt.Sprintf(" inst=%s opens=%d first=%s", strings.Join(i.Instances, ","), i.Opens, i.FirstInstance)
}

// TestDetectorKeepsInstancesServedElsewhere: the leader's dependency
// events count instances another collector serves without a line of
// them; an instance of those that opened (its transition published on
// every collector) keeps the incident open until it closes, however
// many dependency events come meanwhile; a stale line is forgotten.
func TestDetectorKeepsInstancesServedElsewhere(t *testing.T) {
	d, _ := incident.NewDetector(incident.Config{})
	prev := map[string]string{"b": protocol.StateClosed, "c": protocol.StateClosed}
	var got []string
	for _, s := range []step{
		tr(10, "a:open"),
		{at: 11, live: 3, remote: []string{"a"}}, {at: 20, live: 3, remote: []string{"a"}},
		tick(100), {at: 101, live: 3, remote: []string{"a"}}, tick(200),
		tr(210, "a:closed"), {at: 211, live: 3, remote: []string{"a"}}, tick(400),
		tr(500, "c:open"), {at: 501, live: 3, stale: []string{"c"}, remote: []string{"a"}}, tick(700),
	} {
		for _, c := range s.apply(d, prev) {
			got = append(got, describe(c))
		}
	}
	want := []string{
		"opened start=10 inst=a opens=1 first=a",
		"closed start=10 end=210 inst=a opens=1 first=a",
		"opened start=500 inst=c opens=1 first=c",
		"closed start=500 end=501 inst=c opens=1 first=c",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDetector(t *testing.T) {
	tests := []struct {
		name  string
		cfg   incident.Config
		steps []step
		want  []string
	}{
		{
			name: "one instance opens and recovers: incident closes after the quiet period",
			steps: []step{
				tr(10, "a:open"), tr(15, "a:half_open"), tr(16, "a:closed"),
				tick(100), tick(135), tick(136),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"closed start=10 end=16 inst=a opens=1 first=a",
			},
		},
		{
			name: "a reopening within the quiet period merges into the incident",
			steps: []step{
				tr(10, "a:open"), tr(15, "a:half_open"), tr(16, "a:closed"),
				tick(60), tr(70, "b:open"), tr(75, "b:half_open"), tr(76, "b:closed"),
				tick(135), tick(196),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"updated start=10 inst=a,b opens=2 first=a",
				"closed start=10 end=76 inst=a,b opens=2 first=a",
			},
		},
		{
			name: "an opening after the quiet period is a new incident",
			steps: []step{
				tr(10, "a:open"), tr(16, "a:closed"), tick(136),
				tr(200, "a:open"), tr(205, "a:closed"), tick(325),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"closed start=10 end=16 inst=a opens=1 first=a",
				"opened start=200 inst=a opens=1 first=a",
				"closed start=200 end=205 inst=a opens=1 first=a",
			},
		},
		{
			name: "an opening after the quiet period closes the old incident even before a tick",
			steps: []step{
				tr(10, "a:open"), tr(16, "a:closed"), tr(200, "b:open"),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"closed start=10 end=16 inst=a opens=1 first=a",
				"opened start=200 inst=b opens=1 first=b",
			},
		},
		{
			name: "the quiet period starts at the last close even when closes arrive out of order",
			steps: []step{
				tr(10, "a:open"), tr(11, "b:open"), tr(30, "b:closed"), tr(25, "a:closed"), tick(149), tick(150),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"updated start=10 inst=a,b opens=2 first=a",
				"closed start=10 end=30 inst=a,b opens=2 first=a",
			},
		},
		{
			name: "an earlier trip that arrives late moves the start back",
			steps: []step{
				tr(12, "b:open"), tr(11, "a:open"), tr(20, "a:closed"), tr(21, "b:closed"), tick(141),
			},
			want: []string{
				"opened start=12 inst=b opens=1 first=b",
				"updated start=11 inst=a,b opens=2 first=a",
				"closed start=11 end=21 inst=a,b opens=2 first=a",
			},
		},
		{
			name: "the incident stays open while any instance is down",
			steps: []step{
				tr(10, "a:open"), tr(12, "b:open"), tr(16, "a:closed"),
				tick(200), tr(300, "b:half_open"), tr(301, "b:closed"), tick(420), tick(421),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"updated start=10 inst=a,b opens=2 first=a",
				"closed start=10 end=301 inst=a,b opens=2 first=a",
			},
		},
		{
			name: "failed probes count as opens but add no instance",
			steps: []step{
				tr(10, "a:open"), tr(15, "a:half_open"), tr(16, "a:open"), tr(24, "a:half_open"), tr(25, "a:closed"), tick(145),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"updated start=10 inst=a opens=2 first=a",
				"closed start=10 end=25 inst=a opens=2 first=a",
			},
		},
		{
			name: "a forced open drill does not start an incident by default",
			steps: []step{
				tr(10, "a:forced_open"), tr(40, "a:closed"), tick(300),
			},
			want: nil,
		},
		{
			name: "a drill's forced open before a real trip is not the incident's first trip",
			cfg:  incident.Config{Quiet: 10 * time.Second},
			steps: []step{
				tr(10, "a:forced_open"), tr(21, "b:open"), tr(30, "b:closed"), tr(40, "a:closed"), tick(50),
			},
			want: []string{
				"opened start=21 inst=a,b opens=1 first=b",
				"closed start=21 end=40 inst=a,b opens=1 first=b",
			},
		},
		{
			name: "a real trip after a forced open on the same instance is its first trip",
			cfg:  incident.Config{Quiet: 10 * time.Second},
			steps: []step{
				tr(10, "a:forced_open"), tr(21, "a:open"), tr(30, "a:closed"), tick(40),
			},
			want: []string{
				"opened start=21 inst=a opens=1 first=a",
				"closed start=21 end=30 inst=a opens=1 first=a",
			},
		},
		{
			name: "a forced open drill starts one when IncludeForced is set",
			cfg:  incident.Config{IncludeForced: true, Quiet: 10 * time.Second},
			steps: []step{
				tr(10, "a:forced_open"), tr(40, "a:closed"), tick(50),
			},
			want: []string{
				"opened start=10 inst=a opens=0 first=a",
				"closed start=10 end=40 inst=a opens=0 first=a",
			},
		},
		{
			name: "with a share, the incident waits for enough instances and starts at the first trip",
			cfg:  incident.Config{Share: 50},
			steps: []step{
				{at: 0, live: 4}, tr(10, "a:open"), tr(20, "b:open"), tr(25, "a:closed"), tr(26, "b:closed"), tick(146),
			},
			want: []string{
				"opened start=10 inst=a,b opens=2 first=a",
				"closed start=10 end=26 inst=a,b opens=2 first=a",
			},
		},
		{
			name: "with a share, one instance of four opening is no incident",
			cfg:  incident.Config{Share: 50},
			steps: []step{
				{at: 0, live: 4}, tr(10, "a:open"), tr(25, "a:closed"), tick(400),
			},
			want: nil,
		},
		{
			name: "a stale instance does not hold an incident open",
			cfg:  incident.Config{Quiet: 30 * time.Second},
			steps: []step{
				tr(10, "a:open"), tr(11, "b:closed"), {at: 40, live: 1, stale: []string{"a"}}, tick(69), tick(70),
			},
			want: []string{
				"opened start=10 inst=a opens=1 first=a",
				"closed start=10 end=40 inst=a opens=1 first=a",
			},
		},
		{
			name: "a tick during an open incident changes nothing",
			steps: []step{
				tr(10, "a:open"), tick(1000), tick(5000),
			},
			want: []string{"opened start=10 inst=a opens=1 first=a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := incident.NewDetector(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			prev := map[string]string{}
			var got []string
			for _, s := range tt.steps {
				for _, c := range s.apply(d, prev) {
					got = append(got, describe(c))
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestDetectorRestore(t *testing.T) {
	t.Run("an open incident whose instances are all closed starts its quiet period at restore", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		snap := []cbdash.Dependency{{DependencyKey: key, Instances: 2, PerInstance: []*cbdash.InstanceBreaker{
			{Instance: "a", State: protocol.StateClosed}, {Instance: "b", State: protocol.StateClosed},
		}}}
		open := cbdash.Incident{ID: 7, DependencyKey: key, Start: t0, Open: true, Instances: []string{"a"}, Opens: 1}
		d.Restore(snap, []cbdash.Incident{open}, t0.Add(time.Hour))
		if cs := d.Tick(t0.Add(time.Hour + time.Minute)); len(cs) != 0 {
			t.Fatalf("closed before the quiet period: %v", cs)
		}
		cs := d.Tick(t0.Add(time.Hour + 2*time.Minute))
		if len(cs) != 1 || cs[0].Kind != incident.Closed || cs[0].Incident.ID != 7 || !cs[0].Incident.End.Equal(t0.Add(time.Hour)) {
			t.Fatalf("got %+v, want incident 7 closed at restore time", cs)
		}
	})
	t.Run("an open incident with an instance still open stays open", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		snap := []cbdash.Dependency{{DependencyKey: key, Instances: 1, PerInstance: []*cbdash.InstanceBreaker{{Instance: "a", State: protocol.StateOpen}}}}
		d.Restore(snap, []cbdash.Incident{{ID: 3, DependencyKey: key, Start: t0, Open: true, Instances: []string{"a"}}}, t0)
		if cs := d.Tick(t0.Add(time.Hour)); len(cs) != 0 {
			t.Fatalf("closed: %v", cs)
		}
		if got := d.Open(); len(got) != 1 || got[0].ID != 3 {
			t.Fatalf("Open() = %v", got)
		}
	})
}

func TestDetectorResync(t *testing.T) {
	t.Run("states missed while the feed dropped us are taken from the snapshot", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		prev := map[string]string{}
		if cs := d.Observe(tr(10, "a:open").event(prev)); len(cs) != 1 {
			t.Fatalf("got %v", cs)
		}
		// The close of a was lost; the snapshot says closed.
		snap := []cbdash.Dependency{{DependencyKey: key, Instances: 1, PerInstance: []*cbdash.InstanceBreaker{{Instance: "a", State: protocol.StateClosed}}}}
		d.Resync(snap, t0.Add(time.Minute))
		if cs := d.Tick(t0.Add(time.Minute + incident.DefaultQuiet - time.Second)); len(cs) != 0 {
			t.Fatalf("closed early: %v", cs)
		}
		cs := d.Tick(t0.Add(time.Minute + incident.DefaultQuiet))
		if len(cs) != 1 || cs[0].Kind != incident.Closed || !cs[0].Incident.End.Equal(t0.Add(time.Minute)) {
			t.Fatalf("got %+v, want closed with end at the resync", cs)
		}
	})
	trip := func(at int) *protocol.Transition {
		return &protocol.Transition{Breaker: key.Breaker, From: protocol.StateClosed, To: protocol.StateOpen, At: t0.Add(time.Duration(at) * time.Second).UnixMilli()}
	}
	inst := func(name, state string, last *protocol.Transition) *cbdash.InstanceBreaker {
		return &cbdash.InstanceBreaker{Service: key.Service, Breaker: key.Breaker, Instance: name, State: state, LastTrip: last}
	}
	dep := func(ibs ...*cbdash.InstanceBreaker) []cbdash.Dependency {
		return []cbdash.Dependency{{DependencyKey: key, Instances: len(ibs), PerInstance: ibs}}
	}
	t.Run("a trip missed while the feed dropped us opens the incident at its time", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		d.Restore(dep(inst("a", protocol.StateClosed, nil), inst("b", protocol.StateClosed, nil)), nil, t0)
		cs := d.Resync(dep(inst("a", protocol.StateHalfOpen, trip(10)), inst("b", protocol.StateOpen, trip(12))), t0.Add(time.Minute))
		if len(cs) != 2 || cs[0].Kind != incident.Opened || cs[1].Kind != incident.Updated {
			t.Fatalf("got %+v, want opened then updated", cs)
		}
		inc := cs[1].Incident
		if !inc.Start.Equal(t0.Add(10*time.Second)) || inc.FirstInstance != "a" || !slices.Equal(inc.Instances, []string{"a", "b"}) || inc.Opens != 2 {
			t.Fatalf("incident %+v, want a's trip at 10 s first, a and b, 2 opens", inc)
		}
		if cs := d.Resync(dep(inst("a", protocol.StateHalfOpen, trip(10)), inst("b", protocol.StateOpen, trip(12))), t0.Add(2*time.Minute)); len(cs) != 0 {
			t.Fatalf("the same snapshot again: %+v, want nothing", cs)
		}
	})
	t.Run("a trip that also closed while the feed dropped us is an incident too", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		d.Restore(dep(inst("a", protocol.StateClosed, nil)), nil, t0)
		cs := d.Resync(dep(inst("a", protocol.StateClosed, trip(10))), t0.Add(time.Minute))
		if len(cs) != 1 || cs[0].Kind != incident.Opened || !cs[0].Incident.Start.Equal(t0.Add(10*time.Second)) {
			t.Fatalf("got %+v, want an incident opened at 10 s", cs)
		}
		cs = d.Tick(t0.Add(time.Minute + incident.DefaultQuiet))
		if len(cs) != 1 || cs[0].Kind != incident.Closed || !cs[0].Incident.End.Equal(t0.Add(time.Minute)) {
			t.Fatalf("got %+v, want closed with end at the resync", cs)
		}
	})
	t.Run("a trip seen before the drop is not counted again", func(t *testing.T) {
		d, _ := incident.NewDetector(incident.Config{})
		prev := map[string]string{}
		d.Restore(dep(inst("a", protocol.StateClosed, nil)), nil, t0)
		if cs := d.Observe(tr(10, "a:open").event(prev)); len(cs) != 1 {
			t.Fatalf("got %v", cs)
		}
		if cs := d.Resync(dep(inst("a", protocol.StateOpen, trip(10))), t0.Add(time.Minute)); len(cs) != 0 {
			t.Fatalf("got %+v, want nothing", cs)
		}
		if open := d.Open(); len(open) != 1 || open[0].Opens != 1 {
			t.Fatalf("open %+v, want one incident with 1 open", open)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []incident.Config{{Share: -1}, {Share: 101}, {Quiet: -time.Second}} {
		if _, err := incident.NewDetector(cfg); err == nil {
			t.Errorf("NewDetector(%+v) accepted a bad config", cfg)
		}
	}
}

// BenchmarkDetectorObserve feeds dependency events of 1,000 dependencies
// with 3 instances each, and a transition for every hundredth event.
func BenchmarkDetectorObserve(b *testing.B) {
	d, _ := incident.NewDetector(incident.Config{})
	var evs []cbdash.Event
	for i := range 1000 {
		k := cbdash.DependencyKey{Service: "svc", Breaker: "dep-" + strconv.Itoa(i)}
		dep := cbdash.Dependency{DependencyKey: k, Instances: 3}
		for j := range 3 {
			dep.PerInstance = append(dep.PerInstance, &cbdash.InstanceBreaker{Instance: "i-" + strconv.Itoa(j), State: protocol.StateClosed})
		}
		evs = append(evs, cbdash.Event{Kind: cbdash.EventDependency, At: t0, Dependency: &dep})
		if i%100 == 0 {
			to := protocol.StateOpen
			evs = append(evs, cbdash.Event{Kind: cbdash.EventTransition, At: t0, Transition: &cbdash.TransitionRecord{Service: k.Service, Instance: "i-0",
				Transition: protocol.Transition{Breaker: k.Breaker, From: protocol.StateClosed, To: to, At: t0.UnixMilli()}}})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.Observe(evs[i%len(evs)])
	}
}

// An incident handed out in a Change never changes afterwards, although
// the detector's later snapshots share its list of instances until one
// joins: an instance joining between two others (an insert in place)
// leaves the earlier snapshots as they were.
func TestDetectorSnapshotsDoNotChange(t *testing.T) {
	d, err := incident.NewDetector(incident.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prev := map[string]string{}
	var got []incident.Change
	for _, s := range []step{tr(0, "a:open"), tr(1, "d:open"), tr(2, "a:half_open"), tr(3, "a:open"), tr(4, "c:open"), tr(5, "b:open"), tr(6, "d:half_open"), tr(7, "d:open")} {
		got = append(got, d.Observe(s.event(prev))...)
	}
	var insts []string
	for _, c := range got {
		insts = append(insts, strings.Join(c.Incident.Instances, ","))
	}
	want := []string{"a", "a,d", "a,d", "a,c,d", "a,b,c,d", "a,b,c,d"}
	if !slices.Equal(insts, want) {
		t.Fatalf("instances of the changes, after all of them: %q, want %q", insts, want)
	}
	open := d.Open()
	if len(open) != 1 || strings.Join(open[0].Instances, ",") != "a,b,c,d" {
		t.Fatalf("open: %+v", open)
	}
	_ = append(open[0].Instances, "z") // a reader's append does not reach the detector
	d.Observe(tr(8, "e:open").event(prev))
	if again := d.Open(); strings.Join(again[0].Instances, ",") != "a,b,c,d,e" || strings.Join(open[0].Instances, ",") != "a,b,c,d" {
		t.Fatalf("after e: %q, earlier snapshot %q", again[0].Instances, open[0].Instances)
	}
}
