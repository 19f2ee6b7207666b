package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/agent/agenttest"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// clock is the virtual clock of a fixture's breakers and agent: a
// breakertest.Clock (its NewTicker makes it an agent.Clock too) that
// remembers the tickers it gives the agent, so that a test can wait until
// the agent has made its ticker and has taken each tick (a tick that finds
// the previous one untaken is dropped, as with time.Ticker).
type clock struct {
	*breakertest.Clock
	mu      sync.Mutex
	tickers []<-chan time.Time
}

var (
	_ agent.Clock   = (*clock)(nil)
	_ breaker.Clock = (*clock)(nil)
)

func newClock() *clock { return &clock{Clock: breakertest.NewEpochClock()} }

func (c *clock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	ticks, stop := c.Clock.NewTicker(d)
	c.mu.Lock()
	c.tickers = append(c.tickers, ticks)
	c.mu.Unlock()
	return ticks, func() {
		stop()
		c.mu.Lock()
		c.tickers = slices.DeleteFunc(c.tickers, func(t <-chan time.Time) bool { return t == ticks })
		c.mu.Unlock()
	}
}

// ticking reports whether the agent's report ticker exists.
func (c *clock) ticking() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tickers) > 0
}

// taken reports whether every tick delivered so far has been received.
func (c *clock) taken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.tickers {
		if len(t) > 0 {
			return false
		}
	}
	return true
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

// count returns how many times s occurs in the log.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fixture is an agent reporting one breaker to a test collector.
type fixture struct {
	tb    testing.TB
	col   *collector
	agent *agent.Agent
	b     *breaker.Breaker
	clock *clock // nil in a bubble: the breaker and the agent on the system clock
	logs  *logBuffer
}

type fixtureOptions struct {
	breaker breaker.Config
	agent   func(*agent.Config)
	mode    collectorMode
	noStart bool
	// net, when set, makes a fixture for a test in a synctest bubble:
	// its collector listens on net (newMemCollector), the agent dials
	// through net, and the breaker and the agent run on the system
	// clock, which is the bubble's.
	net *agenttest.MemNet
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{tb: t, logs: &logBuffer{}}
	bc := o.breaker
	cfg := agent.Config{
		Service: "checkout", Instance: "checkout-1",
		Labels: map[string]string{"region": "eu-west-1"}, Logger: f.logs.logger(),
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	}
	if o.net != nil {
		f.col = newMemCollector(t, o.net)
		cfg.HTTPClient = o.net.Client()
	} else {
		f.col, f.clock = newCollector(t), newClock()
		bc.Clock, cfg.Clock = f.clock, f.clock
	}
	f.col.mode = o.mode
	cfg.URL, cfg.Token = f.col.url(), f.col.token
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
	if f.clock == nil { // in a bubble
		synctest.Wait()
		if f.col.mode == normal && !f.col.connected() {
			t.Fatal("the agent did not connect at its start")
		}
		return
	}
	// A tick before the report goroutine has made its ticker would be
	// lost.
	waitFor(t, 5*time.Second, "the agent's report ticker", f.clock.ticking)
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

// tick moves time on by one report interval and waits until the agent
// has taken the tick, so that no tick of a test is dropped: on the
// virtual clock by advancing it, in a bubble by sleeping (the agent has
// then also sent its report and had it acknowledged).
func (f *fixture) tick() {
	if f.clock == nil {
		synctest.Sleep(time.Second)
		return
	}
	f.clock.Advance(time.Second)
	waitFor(f.tb, 5*time.Second, "the agent to take its report tick", f.clock.taken)
}

// now is the time of the fixture's clock.
func (f *fixture) now() time.Time {
	if f.clock == nil {
		return time.Now()
	}
	return f.clock.Now()
}

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

// waitFor checks cond every millisecond until it holds, and fails the test
// if it does not within timeout. The timeout is real time: waitFor waits
// for other goroutines and real sockets, never for the virtual clock.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if cond() {
		return
	}
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case <-poll.C:
			if cond() {
				return
			}
		case <-deadline.C:
			if cond() {
				return
			}
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}
