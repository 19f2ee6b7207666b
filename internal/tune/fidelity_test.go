package tune_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// phase is a stretch of a recording: calls per second, of which failing
// per ten fail, spread evenly or, bunched, all first in the second (the
// order a replay from per-second totals cannot know).
type phase struct {
	seconds, perSecond int
	failing            int64
	bunched            bool
}

// fails reports whether the i-th call of a second of p fails.
func (p phase) fails(i int64) bool {
	if p.bunched {
		return i < int64(p.perSecond)*p.failing/10
	}
	return (i+1)*p.failing/10 > i*p.failing/10
}

// record runs phases through a real sdk/breaker configured by cfg, a real
// agent (one instance, reports every second) and the real collector and
// store of a stack, all on one virtual clock, and returns the stack, the
// breaker and the recording's range.
func record(t *testing.T, cfg breaker.Config, phases []phase) (*stacktest.Stack, *breaker.Breaker, time.Time, time.Time) {
	clk := clocktest.Virtual()
	clk.Set(clk.Now().Truncate(time.Second))
	s := stacktest.Start(t, stacktest.Options{Clock: clk})
	cfg.Clock = clk
	br, err := breaker.New("db", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, s, clk, br)
	from := clk.Now()
	for _, p := range phases {
		for range p.seconds {
			oneSecond(t, clk, ag, br, p)
		}
	}
	return s, br, from, clk.Now()
}

// oneSecond makes p.perSecond calls spread over a second of clk, then
// waits for the agent to send that second's report.
func oneSecond(t *testing.T, clk *breakertest.Clock, ag *agent.Agent, br *breaker.Breaker, p phase) {
	step := time.Second / time.Duration(p.perSecond)
	sent := ag.Stats().Sent
	for i := range int64(p.perSecond) {
		if c, err := br.Allow(); err == nil {
			o := breaker.Success
			if p.fails(i) {
				o = breaker.Failure
			}
			c.Report(o)
		}
		clk.Advance(step)
	}
	eventually.True(t, "the second's report sent", func() bool { return ag.Stats().Sent > sent })
}

func startAgent(t *testing.T, s *stacktest.Stack, clk *breakertest.Clock, br *breaker.Breaker) *agent.Agent {
	t.Helper()
	ag, err := agent.New(agent.Config{URL: s.AgentURL(), Token: s.AgentToken, Service: "api", Instance: "a1", ReportInterval: time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Register(br); err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ag.Close(ctx)
	})
	eventually.True(t, "the agent connected", func() bool { return ag.Stats().Connected })
	return ag
}

var apiDB = cbdash.DependencyKey{Service: "api", Breaker: "db"}

// recorded waits for the store to hold every call of br and returns the
// stored transitions in the order the breaker made them (by generation:
// an open > half-open and a failed probe share their millisecond).
func recorded(t *testing.T, s *stacktest.Stack, br *breaker.Breaker, from, to time.Time) []tune.Transition {
	want := int64(br.Snapshot().Totals.Admitted)
	eventually.True(t, "the history stored", func() bool {
		pts, err := s.Store.History(context.Background(), cbdash.HistoryQuery{DependencyKey: apiDB, From: from, To: to, Resolution: cbdash.ResolutionSecond})
		var n int64
		for _, p := range pts {
			n += p.Counts.Admitted
		}
		return err == nil && n == want
	})
	recs, err := s.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "api", Breaker: "db", From: from, To: to.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b cbdash.TransitionRecord) int { return cmp.Compare(a.Generation, b.Generation) })
	out := make([]tune.Transition, 0, len(recs))
	for _, r := range recs {
		out = append(out, tune.Transition{At: time.UnixMilli(r.At).UTC(), From: r.From, To: r.To, Cause: r.Cause.Kind})
	}
	return out
}

// liveReplay replays [from, to) of the stack's store with the settings the
// breaker reported in its hello, through a tune.Service.
func liveReplay(t *testing.T, s *stacktest.Stack, from, to time.Time) tune.Run {
	liveOf := func(k cbdash.DependencyKey) (protocol.BreakerConfig, error) {
		return tune.LiveFrom(s.Collector.Dependency(k))
	}
	rep, err := tune.NewService(s.Store, liveOf, 1, time.Minute).Replay(context.Background(), tune.Request{DependencyKey: apiDB, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Runs[0]
}

// fidelity checks that replayed has recorded's transitions, each within
// 1 s, and returns the largest difference.
func fidelity(t *testing.T, recorded, replayed []tune.Transition) time.Duration {
	t.Helper()
	if len(recorded) != len(replayed) {
		t.Fatalf("recorded %d transitions, replayed %d:\n%s\n%s", len(recorded), len(replayed), lanes(recorded), lanes(replayed))
	}
	var worst time.Duration
	for i, r := range recorded {
		p := replayed[i]
		d := time.Duration(math.Abs(float64(p.At.Sub(r.At))))
		worst = max(worst, d)
		if r.From != p.From || r.To != p.To || d > time.Second {
			t.Errorf("transition %d: recorded %s>%s at %v, replayed %s>%s at %v", i, r.From, r.To, r.At, p.From, p.To, p.At)
		}
	}
	return worst
}

func lanes(ts []tune.Transition) string {
	s := ""
	for _, t := range ts {
		s += fmt.Sprintf("%s %s>%s; ", t.At.Format("15:04:05.000"), t.From, t.To)
	}
	return s
}

// A dependency healthy for 20 s, failing 3 calls in 10 for 20 s (under
// the threshold), down for 30 s (a trip, then failed probes), healthy
// again for 30 s (a probe closes the breaker).
var outage = []phase{{20, 20, 0, false}, {20, 20, 3, false}, {30, 20, 10, false}, {30, 20, 0, false}}

// bunchedOutage is outage with each second's failures first in it and
// 6 in 10 failing while the dependency is "down", so that probes meet
// failures and successes.
var bunchedOutage = []phase{{20, 20, 0, true}, {20, 20, 3, true}, {30, 20, 6, true}, {30, 20, 0, true}}

func TestReplayOfLiveSettingsReproducesTheRecordedTransitions(t *testing.T) {
	count := breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: 5 * time.Second}
	for _, c := range []struct {
		name   string
		cfg    breaker.Config
		phases []phase
	}{
		{"count window", count, outage},
		{"time window", breaker.Config{Window: breaker.Window{Kind: breaker.TimeWindow, Duration: 10 * time.Second},
			MinimumCalls: 20, FailureRateThreshold: 40, OpenDuration: 4 * time.Second}, outage},
		{"count window, failures first in each second", count, bunchedOutage},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, br, from, to := record(t, c.cfg, c.phases)
			rec := recorded(t, s, br, from, to)
			if len(rec) < 4 {
				t.Fatalf("the recording has %d transitions: %s", len(rec), lanes(rec))
			}
			run := liveReplay(t, s, from, to)
			worst := fidelity(t, rec, run.Transitions)
			t.Logf("%s: %d transitions, the largest difference %v", c.name, len(rec), worst)
		})
	}
}
