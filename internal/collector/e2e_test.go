package collector

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

var errBoom = errors.New("boom")

// fleetMember is a real agent on the harness's clock with one real
// breaker on a virtual clock that starts at the harness's now.
type fleetMember struct {
	ag    *agent.Agent
	br    *breaker.Breaker
	clock *breakertest.Clock
}

func startMember(t *testing.T, h *harness, instance string, logs *logBuffer) *fleetMember {
	t.Helper()
	clk := breakertest.NewClock(h.now())
	br, err := breaker.New("db", breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: 5 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(tlog{t}, nil))
	}
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	ag, err := agent.New(agent.Config{
		URL: h.wsURL(), Token: h.token, Service: "api", Instance: instance,
		ReportInterval: 50 * time.Millisecond, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
		Logger: logger, Clock: h.clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Register(br); err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	m := &fleetMember{ag: ag, br: br, clock: clk}
	t.Cleanup(func() { m.close(t) })
	eventually.True(t, instance+" connected", func() bool { return ag.Stats().Connected })
	return m
}

func (m *fleetMember) close(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.ag.Close(ctx); err != nil && !errors.Is(err, agent.ErrClosed) {
		t.Errorf("agent close: %v", err)
	}
}

// cycle drives the breaker closed > open > half_open > closed: 10 failing
// calls trip it, the open duration passes on the virtual clock, and one
// successful probe closes it. Every call is admitted.
func (m *fleetMember) cycle(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		_ = m.br.Execute(ctx, func(context.Context) error { return errBoom })
	}
	m.clock.Advance(6 * time.Second)
	if err := m.br.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("probe: %v", err)
	}
}

type logBuffer struct {
	mu sync.Mutex
	sb strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.String()
}

// TestRealAgentTransitionReachesSubscriberQuickly: a transition travels
// from the breaker to a subscriber as it happens, not with the periodic
// publication of changed counts (an hour here, so a transition that
// arrived at all did not wait for it). The time it took is logged, not
// bounded: a busy machine may take long, and the mechanism is what is
// asserted.
func TestRealAgentTransitionReachesSubscriberQuickly(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", func(c *Config) { c.PublishInterval = time.Hour })
	m := startMember(t, h, "a1", nil)
	_, events, cancel := h.col.Subscribe()
	defer cancel()
	start := time.Now() // real time: how fast the transition travels
	for range 10 {
		_ = m.br.Execute(context.Background(), func(context.Context) error { return errBoom })
	}
	timeout := time.NewTimer(30 * time.Second) // a bound for a broken build, not a measurement
	defer timeout.Stop()
	for done := false; !done; {
		select {
		case e := <-events:
			if e.Kind == cbdash.EventTransition && e.Transition.To == protocol.StateOpen {
				t.Logf("transition at the subscriber %v after the tripping call", time.Since(start))
				if e.Transition.Instance != "a1" || e.Transition.Cause.Kind != protocol.CauseFailureRate {
					t.Fatalf("transition %+v", e.Transition)
				}
				done = true
			}
		case <-timeout.C:
			t.Fatal("the transition never reached the subscriber (publication is hourly: it must be pushed as it happens)")
		}
	}
	eventually.True(t, "dependency open", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		return err == nil && d.State == protocol.StateOpen && d.ByState[protocol.StateOpen] == 1
	})
}

// TestRealAgentBatchRefusedEarlierDataStays: an instance whose breaker
// clock runs an hour ahead sends a transition the collector refuses (with
// a reason the agent logs); what it sent before stays stored, and the
// connection goes on.
func TestRealAgentBatchRefusedEarlierDataStays(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	logs := &logBuffer{}
	m := startMember(t, h, "skewed", logs)
	m.cycle(t) // three good transitions
	eventually.True(t, "good transitions stored", func() bool { return len(storedTransitions(t, h, "skewed")) == 3 })
	m.clock.Advance(time.Hour)
	for range 10 {
		_ = m.br.Execute(context.Background(), func(context.Context) error { return errBoom })
	}
	eventually.True(t, "the refusal", func() bool { return m.ag.Stats().Dropped.Batches >= 1 })
	// The agent counts the drop, then logs it: wait for the line.
	if !eventually.Wait(eventually.Timeout, func() bool { return strings.Contains(logs.String(), "future") }) {
		t.Fatalf("the agent's log does not carry the collector's reason:\n%s", logs.String())
	}
	if got := len(storedTransitions(t, h, "skewed")); got != 3 {
		t.Fatalf("%d transitions stored, want the 3 sent before the refusal", got)
	}
	if !m.ag.Stats().Connected {
		t.Fatal("a refused batch closed the connection")
	}
}

// TestRealAgentsCollectorKilledMidStream kills the collector (server and
// store) while three agents stream transitions and counts, restarts it on
// the same database and address, and checks that every transition and
// every call is stored exactly once.
func TestRealAgentsCollectorKilledMidStream(t *testing.T) {
	t.Parallel()
	const cycles = 12
	h := startHarness(t, "", nil)
	addr := h.srv.Listener.Addr().String()
	names := []string{"a1", "a2", "a3"}
	var members []*fleetMember
	for _, n := range names {
		members = append(members, startMember(t, h, n, nil))
	}
	var h2 *harness
	for i := range cycles {
		if i == cycles/2 {
			h.stop()
			h2 = startHarnessOn(t, h.path, addr, h.restartOpts)
		}
		for _, m := range members {
			m.cycle(t)
		}
	}
	for i, m := range members {
		eventually.True(t, names[i]+" reconnected", func() bool { return m.ag.Stats().Reconnects > 0 })
		m.close(t) // flushes: returns nil once everything is acknowledged
	}
	for _, n := range names {
		ts := storedTransitions(t, h2, n)
		if len(ts) != 3*cycles {
			t.Fatalf("%s: %d transitions stored, want %d", n, len(ts), 3*cycles)
		}
		seen := map[uint64]bool{}
		for _, tr := range ts {
			if seen[tr.Generation] {
				t.Fatalf("%s: generation %d stored twice", n, tr.Generation)
			}
			seen[tr.Generation] = true
		}
	}
	// History is per dependency: the three instances' calls summed.
	pts, err := h2.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h2.now().Add(-time.Hour), To: h2.now().Add(time.Hour), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted, failures int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
		failures += p.Counts.Failures
	}
	n := int64(len(names))
	if admitted != 11*cycles*n || failures != 10*cycles*n {
		t.Fatalf("stored admitted %d failures %d, want %d and %d", admitted, failures, 11*cycles*n, 10*cycles*n)
	}
}

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) { l.t.Log(strings.TrimSpace(string(p))); return len(p), nil }
