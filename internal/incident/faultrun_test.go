package incident_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// faultRun is a recorded fault run (testdata/fault-run.json): what three
// instances of one dependency reported, second by second.
type faultRun struct {
	Service   string   `json:"service"`
	Breaker   string   `json:"breaker"`
	Instances []string `json:"instances"`
	Seconds   int      `json:"seconds"`
	Faults    []struct {
		From, To       int
		Failures, Slow int64
		Of             int64
	} `json:"faults"`
	Transitions []struct {
		AtMs     int64  `json:"at_ms"`
		Instance string `json:"instance"`
		From, To string
		Cause    protocol.Cause `json:"cause"`
		OpenMs   int64          `json:"open_ms"`
	} `json:"transitions"`
	ConfigChanges []struct {
		AtMs                 int64   `json:"at_ms"`
		Instance             string  `json:"instance"`
		FailureRateThreshold float64 `json:"failure_rate_threshold"`
	} `json:"config_changes"`
	Commands []struct {
		ID       string `json:"id"`
		AtMs     int64  `json:"at_ms"`
		Action   string `json:"action"`
		Instance string `json:"instance"`
		TTLMs    int64  `json:"ttl_ms"`
		Actor    string `json:"actor"`
		Reason   string `json:"reason"`
	} `json:"commands"`
	Want []struct {
		StartMs       int64    `json:"start_ms"`
		EndMs         int64    `json:"end_ms"`
		Instances     []string `json:"instances"`
		Opens         int      `json:"opens"`
		FirstInstance string   `json:"first_instance"`
		FirstCause    string   `json:"first_cause"`
	} `json:"want"`
}

func loadRun(t *testing.T, name string) faultRun {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r faultRun
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r faultRun) transitionRecords() []cbdash.TransitionRecord {
	var out []cbdash.TransitionRecord
	for _, tr := range r.Transitions {
		out = append(out, cbdash.TransitionRecord{Service: r.Service, Instance: tr.Instance, Transition: protocol.Transition{
			Breaker: r.Breaker, From: tr.From, To: tr.To, At: t0.UnixMilli() + tr.AtMs, Cause: tr.Cause, OpenMillis: tr.OpenMs}})
	}
	return out
}

// window is what an instance in state st reports for second sec: ten
// calls, failing or slow as the faults say while admitted; rejected and
// served by a fallback while open.
func (r faultRun) window(sec int, st string) protocol.Window {
	w := protocol.Window{Breaker: r.Breaker, Start: t0.UnixMilli() + int64(sec)*1000, Millis: 1000, State: st}
	c := &w.Counts
	switch st {
	case protocol.StateOpen, protocol.StateForcedOpen:
		c.RejectedOpen, c.FallbackSuccess, c.FallbackFailure = 10, 9, 1
		return w
	case protocol.StateHalfOpen:
		c.Admitted, c.RejectedHalfOpen, c.FallbackSuccess = 1, 9, 9
	default:
		c.Admitted = 10
	}
	var failures, slow int64
	for _, f := range r.Faults {
		if sec >= f.From && sec < f.To {
			failures, slow = f.Failures*c.Admitted/f.Of, f.Slow*c.Admitted/f.Of
		}
	}
	c.Failures, c.Errors, c.Slow, c.Successes = failures, failures, slow, c.Admitted-failures
	return w
}

// record stores the run as the agents would have: a hello per instance,
// then a batch per instance per ten seconds with its windows and
// transitions, and the operator commands.
func (r faultRun) record(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	started := t0.Add(-time.Hour).UnixMilli()
	cfg := breakerConfig(r.Breaker)
	trs := r.transitionRecords()
	for _, inst := range r.Instances {
		h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: r.Service, Instance: inst, SDKVersion: "test",
			StartedAt: started, Breakers: []protocol.BreakerConfig{cfg}}
		if err := s.SaveHello(ctx, h, t0); err != nil {
			t.Fatal(err)
		}
		state, seq := protocol.StateClosed, uint64(0)
		var b protocol.Batch
		for sec := 0; sec < r.Seconds; sec++ {
			end := t0.UnixMilli() + int64(sec+1)*1000
			for _, tr := range trs {
				if tr.Instance == inst && tr.At >= end-1000 && tr.At < end {
					b.Transitions = append(b.Transitions, tr.Transition)
					state = tr.To
				}
			}
			b.Windows = append(b.Windows, r.window(sec, state))
			if sec%10 == 9 || sec == r.Seconds-1 {
				seq++
				b.Type, b.Seq, b.SentAt = protocol.TypeBatch, seq, end
				if _, err := s.SaveBatch(ctx, r.Service, inst, started, b, time.UnixMilli(end)); err != nil {
					t.Fatalf("instance %s batch %d: %v", inst, seq, err)
				}
				b = protocol.Batch{}
			}
		}
	}
	for _, c := range r.Commands {
		at := t0.Add(time.Duration(c.AtMs) * time.Millisecond)
		cmd := cbdash.Command{ID: c.ID, CommandRequest: cbdash.CommandRequest{Service: r.Service, Breaker: r.Breaker, Action: c.Action,
			Instance: c.Instance, TTL: time.Duration(c.TTLMs) * time.Millisecond, Reason: c.Reason, Actor: c.Actor},
			IssuedAt: at, ExpiresAt: at.Add(time.Duration(c.TTLMs) * time.Millisecond),
			Targets: []cbdash.CommandTarget{{Instance: c.Instance, Status: cbdash.TargetApplied, State: protocol.StateForcedClosed, At: at.Add(200 * time.Millisecond)}}}
		if err := s.CreateCommand(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
}

func breakerConfig(name string) protocol.BreakerConfig {
	return protocol.BreakerConfig{Name: name, WindowKind: "count", WindowSize: 20, FailureRateThreshold: 50,
		SlowCallDurationMillis: 250, SlowCallRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}
}

// events is the live feed of the run: its transitions, and for each
// configuration change a dependency event before it and one with it.
func (r faultRun) events() []cbdash.Event {
	var out []cbdash.Event
	for _, tr := range r.transitionRecords() {
		out = append(out, cbdash.Event{Kind: cbdash.EventTransition, At: time.UnixMilli(tr.At).UTC(), Transition: &tr})
	}
	k := cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker}
	for _, cc := range r.ConfigChanges {
		for i, thr := range []float64{50, cc.FailureRateThreshold} {
			cfg := breakerConfig(r.Breaker)
			cfg.FailureRateThreshold = thr
			d := cbdash.Dependency{DependencyKey: k, Instances: len(r.Instances)}
			for _, inst := range r.Instances {
				same := breakerConfig(r.Breaker) // one per line: equal values, different pointers
				ib := &cbdash.InstanceBreaker{Service: r.Service, Breaker: r.Breaker, Instance: inst, State: protocol.StateClosed, Config: &same}
				if inst == cc.Instance {
					ib.Config = &cfg
				}
				d.PerInstance = append(d.PerInstance, ib)
			}
			at := t0.Add(time.Duration(cc.AtMs-int64(1-i)*1000) * time.Millisecond)
			out = append(out, cbdash.Event{Kind: cbdash.EventDependency, At: at, Dependency: &d})
		}
	}
	slices.SortStableFunc(out, func(a, b cbdash.Event) int { return a.At.Compare(b.At) })
	return out
}

// feed is the live feed the Service subscribes to: here, the recorded
// transitions, sent by the test.
type feed struct {
	ch chan cbdash.Event
}

func (f *feed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	return nil, f.ch, func() {}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	return storetest.Open(t, breakertest.NewClock(t0))
}

// goldenDate stands in the golden Markdown for the date of t0, which
// CBDASH_TEST_EPOCH moves; the times of day are t0's (noon) whatever the
// epoch, and are compared as they are.
const goldenDate = "{{DATE}}"

// checkGolden compares md with testdata/name, where goldenDate stands
// for t0's date; -update rewrites the file from md.
func checkGolden(t *testing.T, name string, md []byte) {
	t.Helper()
	date := t0.Format(time.DateOnly)
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(strings.ReplaceAll(string(md), date, goldenDate)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(string(b), goldenDate, date); string(md) != want {
		t.Errorf("markdown differs from %s (with %s for %s; run with -update and read it):\n%s", golden, goldenDate, date, md)
	}
}

func TestFaultRunIncidents(t *testing.T) {
	run := loadRun(t, "fault-run.json")
	st := openStore(t)
	run.record(t, st)

	clk := breakertest.NewClock(t0)
	f := &feed{ch: make(chan cbdash.Event)}
	svc, err := incident.NewService(incident.ServiceConfig{Source: f, Store: st, Clock: clk, Tick: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	list := func(q cbdash.IncidentQuery) []cbdash.Incident {
		l, err := st.Incidents(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, ev := range run.events() {
		clk.Set(ev.At)
		f.ch <- ev
	}
	// Let the quiet period of the last incident pass: the service's ticks
	// on the clock close it.
	clk.Set(t0.Add(time.Duration(run.Seconds) * time.Second))
	eventually.True(t, "every incident to close", func() bool {
		return len(list(cbdash.IncidentQuery{})) == len(run.Want) && len(list(cbdash.IncidentQuery{OpenOnly: true})) == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := list(cbdash.IncidentQuery{})
	for i, w := range run.Want {
		g := got[i]
		start, end := t0.Add(time.Duration(w.StartMs)*time.Millisecond), t0.Add(time.Duration(w.EndMs)*time.Millisecond)
		if !g.Start.Equal(start) || !g.End.Equal(end) || g.Duration(time.Time{}) != end.Sub(start) || g.Open ||
			!slices.Equal(g.Instances, w.Instances) || g.Opens != w.Opens || g.FirstInstance != w.FirstInstance || g.FirstCause.Kind != w.FirstCause {
			t.Errorf("incident %d (newest first) = %+v\nwant start %s end %s instances %v opens %d first %s/%s",
				i, g, start, end, w.Instances, w.Opens, w.FirstInstance, w.FirstCause)
		}
	}

	t.Run("the first incident's report sums the history and reads as a timeline", func(t *testing.T) {
		first := got[len(got)-1]
		inc, err := st.Incident(context.Background(), first.ID)
		if err != nil {
			t.Fatal(err)
		}
		inc.Notes = []cbdash.IncidentNote{{IncidentID: inc.ID, At: t0.Add(40 * time.Second), Author: "ann", Text: "payments deploy 2026.11.29-3 rolled back"}}
		rep, err := incident.Build(context.Background(), st, inc, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Summary
		// a: open 12-17, 17.2-24.7, 55-60 (whole seconds in state open at
		// their end: 12..16, 17..23, 55..59 = 17 s); b: 13..17, 18..25 = 13 s.
		// Each open second rejects 10 calls and serves 10 fallbacks (1 fails);
		// each half-open second rejects 9 and serves 9 fallbacks.
		if s.DegradedSince != t0.Add(8*time.Second) || s.TimeToFirstOpen != 4*time.Second {
			t.Errorf("degraded since %s (time to first open %s), want 8 s and 4 s", s.DegradedSince, s.TimeToFirstOpen)
		}
		if s.Duration != 49*time.Second || len(s.Instances) != 2 || s.Opens != 5 {
			t.Errorf("summary = %+v", s)
		}
		if s.CallsRejected == 0 || s.FallbackCalls == 0 || s.FallbacksFailed == 0 || s.FallbacksFailed >= s.FallbackCalls {
			t.Errorf("rejections/fallbacks = %d/%d/%d", s.CallsRejected, s.FallbackCalls, s.FallbacksFailed)
		}
		// Fallback calls are those served and those failed; the
		// deprecated fallbacks_served keeps its meaning, the calls.
		if s.FallbackCalls != s.FallbackSuccesses+s.FallbacksFailed || s.FallbacksServed != s.FallbackCalls {
			t.Errorf("fallback calls %d, served %d, failed %d, fallbacks_served %d", s.FallbackCalls, s.FallbackSuccesses, s.FallbacksFailed, s.FallbacksServed)
		}
		if len(rep.Lanes) != 3 {
			t.Fatalf("lanes = %+v, want a, b and c (c was forced closed within the window)", rep.Lanes)
		}
		if len(rep.Commands) != 1 || rep.Commands[0].ID != "cmd-1" {
			t.Errorf("commands = %+v", rep.Commands)
		}
		checkGolden(t, "fault-run.md", incident.Markdown(rep))
	})

	t.Run("events outside an incident are marked, and its export keeps to its own span", func(t *testing.T) {
		outside := 0
		for _, g := range got {
			inc, err := st.Incident(context.Background(), g.ID)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := incident.Build(context.Background(), st, inc, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep.Timeline {
				want := ""
				if e.At.Before(inc.Start) {
					want = incident.OutsideBefore
				} else if e.At.After(inc.End) {
					want = incident.OutsideAfter
				}
				if e.Outside != want {
					t.Errorf("incident %d (%s to %s): entry at %s %q marked %q, want %q", inc.ID, inc.Start, inc.End, e.At, e.Text, e.Outside, want)
				}
				if want != "" {
					outside++
				}
			}
			own := rep.Own()
			if !own.From.Equal(inc.Start) || !own.To.Equal(inc.End) {
				t.Errorf("incident %d: own span %s to %s, want %s to %s", inc.ID, own.From, own.To, inc.Start, inc.End)
			}
			for _, e := range own.Timeline {
				if e.At.Before(inc.Start) || e.At.After(inc.End) {
					t.Errorf("incident %d: the export keeps %s %q, outside %s to %s", inc.ID, e.At, e.Text, inc.Start, inc.End)
				}
			}
			for _, c := range own.Commands {
				if c.IssuedAt.Before(inc.Start) || c.IssuedAt.After(inc.End) {
					t.Errorf("incident %d: the export keeps command %s at %s", inc.ID, c.ID, c.IssuedAt)
				}
			}
		}
		if outside == 0 {
			t.Fatal("no incident's lead-in or tail held an event: the fault run does not test the marks")
		}
	})
}
