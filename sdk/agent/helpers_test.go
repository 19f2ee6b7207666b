package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// clock is a virtual clock for both the breakers (breaker.Clock) and the
// agent (agent.Clock): its tickers fire when the test advances it.
type clock struct {
	*breakertest.Clock
}

var (
	_ agent.Clock   = clock{}
	_ breaker.Clock = clock{}
)

func newClock() clock {
	return clock{breakertest.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))}
}

func (c clock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	// Unbuffered, and each tick waits to be taken: every Advance by d is
	// seen by the agent, at the tick's exact time, so tests are
	// deterministic.
	ch := make(chan time.Time)
	stopped := make(chan struct{})
	var mu sync.Mutex
	var t breaker.Timer
	var tick func()
	tick = func() {
		select {
		case ch <- c.Now():
		case <-stopped:
			return
		}
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-stopped:
		default:
			t = c.AfterFunc(d, tick)
		}
	}
	t = c.AfterFunc(d, tick)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(stopped)
			mu.Lock()
			defer mu.Unlock()
			t.Stop()
		})
	}
}

// logBuffer collects an agent's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fixture is an agent reporting one breaker to a test collector.
type fixture struct {
	col   *collector
	agent *agent.Agent
	b     *breaker.Breaker
	clock clock
	logs  *logBuffer
}

type fixtureOptions struct {
	breaker breaker.Config
	agent   func(*agent.Config)
	mode    collectorMode
	noStart bool
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{col: newCollector(t), clock: newClock(), logs: &logBuffer{}}
	f.col.mode = o.mode
	bc := o.breaker
	bc.Clock = f.clock
	if bc.MinimumCalls == 0 {
		bc.MinimumCalls = 4
	}
	if bc.OpenDuration == 0 {
		bc.OpenDuration = 5 * time.Second
	}
	var err error
	if f.b, err = breaker.New("payments", bc); err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{
		URL: f.col.url(), Token: f.col.token, Service: "checkout", Instance: "checkout-1",
		Labels: map[string]string{"region": "eu-west-1"}, Clock: f.clock, Logger: f.logs.logger(),
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	}
	if o.agent != nil {
		o.agent(&cfg)
	}
	if f.agent, err = agent.New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Register(f.b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = f.agent.Close(ctx)
	})
	if !o.noStart {
		f.start(t)
	}
	return f
}

func (f *fixture) start(t testing.TB) {
	t.Helper()
	if err := f.agent.Start(); err != nil {
		t.Fatal(err)
	}
	if f.col.mode == normal {
		waitFor(t, 5*time.Second, "the agent to connect", f.col.connected)
	}
}

// close closes the agent with a deadline and fails the test if it could
// not flush.
func (f *fixture) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.agent.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// tick advances the virtual clock by one report interval.
func (f *fixture) tick() { f.clock.Advance(time.Second) }

// calls runs n calls through b that succeed or fail.
func calls(b *breaker.Breaker, n int, fail bool) {
	for range n {
		_ = b.Execute(context.Background(), func(context.Context) error {
			if fail {
				return errBoom
			}
			return nil
		})
	}
}

var errBoom = errorString("boom")

type errorString string

func (e errorString) Error() string { return string(e) }
