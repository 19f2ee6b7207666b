package stacktest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startAgent connects a real agent with one breaker "db" of service api
// to s, on clk.
func startAgent(t *testing.T, s *stacktest.Stack, clk interface {
	breaker.Clock
	agent.Clock
}) (*agent.Agent, *breaker.Breaker) {
	t.Helper()
	br, err := breaker.New("db", breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: 5 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{URL: s.AgentURL(), Token: s.AgentToken, Service: "api", Instance: "a1",
		ReportInterval: 100 * time.Millisecond, Clock: clk})
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
	return ag, br
}

func breakers(t *testing.T, s *stacktest.Stack) []cbdash.Dependency {
	t.Helper()
	resp, err := s.Server.Client().Get(s.URL() + "/api/v1/breakers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/breakers: %d", resp.StatusCode)
	}
	var deps []cbdash.Dependency
	if err := json.NewDecoder(resp.Body).Decode(&deps); err != nil {
		t.Fatal(err)
	}
	return deps
}

func TestStack(t *testing.T) {
	t.Run("an agent on the running clock is seen over the API and survives a restart", func(t *testing.T) {
		anonymous := func(c *web.Config) { c.Anonymous = true }
		s := stacktest.Start(t, stacktest.Options{Web: anonymous})
		if now := s.Clock.Now(); now.Before(clocktest.Epoch()) || now.After(clocktest.Epoch().Add(time.Minute)) {
			t.Errorf("the default clock reads %v, want just after the test epoch %v", now, clocktest.Epoch())
		}
		ag, _ := startAgent(t, s, s.Clock.(*clocktest.Running))
		eventually.True(t, "api/db listed", func() bool { return len(breakers(t, s)) == 1 })
		if d := breakers(t, s)[0]; d.Service != "api" || d.Breaker != "db" || d.State != "closed" {
			t.Errorf("listed %+v, want api/db closed", d)
		}
		s.Stop()
		again := stacktest.Start(t, stacktest.Options{Clock: s.Clock, Path: s.Path, Addr: s.Addr, Web: anonymous})
		if again.Addr != s.Addr {
			t.Errorf("restarted on %s, want %s", again.Addr, s.Addr)
		}
		eventually.True(t, "api/db restored or reconnected", func() bool { return len(breakers(t, again)) == 1 })
		// Close the agent while a collector still takes its last report.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ag.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	t.Run("on a virtual clock the collector moves only when the test advances it", func(t *testing.T) {
		clk := clocktest.Virtual()
		s := stacktest.Start(t, stacktest.Options{Clock: clk})
		_, br := startAgent(t, s, clk)
		k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
		for range 10 {
			_ = br.Execute(context.Background(), func(context.Context) error { return context.DeadlineExceeded })
		}
		eventually.True(t, "the open transition applied", func() bool {
			clk.Advance(100 * time.Millisecond) // the agent's report tick, on the clock
			d, err := s.Collector.Dependency(k)
			return err == nil && d.State == "open"
		})
		d, _ := s.Collector.Dependency(k)
		if d.LastChange.Before(clocktest.Epoch()) || d.LastChange.After(clk.Now()) {
			t.Errorf("last change at %v, want between the epoch %v and the clock's now %v", d.LastChange, clocktest.Epoch(), clk.Now())
		}
	})
}
