package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// soakSize is the fleet of TestFleetThroughTwoKillsStoresExactlyWhatTheBreakersCounted,
// from the environment: CBDASH_SOAK_AGENTS agents (20) of CBDASH_SOAK_BREAKERS
// breakers (5) each, every breaker called CBDASH_SOAK_CALLS times a second
// (10), each phase (both up, after each kill) lasting at least
// CBDASH_SOAK_SECONDS (3). Issue 36's check is
// CBDASH_SOAK_AGENTS=1000 CBDASH_SOAK_BREAKERS=20: 20,000 window reports a
// second.
type soakSize struct {
	agents, breakers, calls int
	phase                   time.Duration
}

func soakFromEnv(t *testing.T) soakSize {
	t.Helper()
	n := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		i, err := strconv.Atoi(v)
		if err != nil || i <= 0 {
			t.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return i
	}
	return soakSize{
		agents: n("CBDASH_SOAK_AGENTS", 20), breakers: n("CBDASH_SOAK_BREAKERS", 5),
		calls: n("CBDASH_SOAK_CALLS", 10), phase: time.Duration(n("CBDASH_SOAK_SECONDS", 3)) * time.Second,
	}
}

// TestFleetThroughTwoKillsStoresExactlyWhatTheBreakersCounted is issue
// 36's exactness check: real agents and breakers report once a second to
// two `cbdash serve` processes over one PostgreSQL database; A is killed
// with SIGKILL (its agents move to B), started again, then B is killed
// (every agent moves to A). What the store holds for every breaker equals
// what the breakers themselves counted: nothing acknowledged by either
// killed collector lost, nothing resent stored twice, with both
// collectors writing at the same time before and between the kills.
func TestFleetThroughTwoKillsStoresExactlyWhatTheBreakersCounted(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("needs PostgreSQL: set %s (see README, Tests on PostgreSQL)", pgtest.EnvDSN)
	}
	if testing.Short() {
		t.Skip("builds cbdash and runs two processes")
	}
	size := soakFromEnv(t)
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	bin := buildCbdash(t, dir)
	agentTok := cbdashCLI(t, bin, "token", "create", "--service", "soak", "--db", dsn)
	aAddr, bAddr := freeAddr(t), freeAddr(t)
	a := startServeAt(t, bin, dsn, "A", aAddr)
	b := startServeAt(t, bin, dsn, "B", bAddr)
	urls := []string{a.agentURL(), b.agentURL()}

	type inst struct {
		ag  *agent.Agent
		brs []*breaker.Breaker
	}
	fleet := make([]inst, size.agents)
	for i := range fleet {
		ag, err := agent.New(agent.Config{
			URLs: urls, Token: agentTok, Service: "soak", Instance: fmt.Sprintf("i%04d", i),
			ReportInterval: time.Second, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
			FailbackAfter: time.Hour, // each agent stays where a kill sent it: the phases are the kills
		})
		if err != nil {
			t.Fatal(err)
		}
		for j := range size.breakers {
			br, err := breaker.New(fmt.Sprintf("dep%02d", j), breaker.Config{MinimumCalls: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			if err := ag.Register(br); err != nil {
				t.Fatal(err)
			}
			fleet[i].brs = append(fleet[i].brs, br)
		}
		if err := ag.Start(); err != nil {
			t.Fatal(err)
		}
		fleet[i].ag = ag
		t.Cleanup(func() { _ = ag.Close(context.Background()) })
	}
	on := func(url string) int {
		n := 0
		for _, m := range fleet {
			if s := m.ag.Stats(); s.Connected && s.Collector == url {
				n++
			}
		}
		return n
	}
	acked := func() uint64 {
		var n uint64
		for _, m := range fleet {
			n += m.ag.Stats().Acked
		}
		return n
	}
	// ackedAll waits until every agent has had k more batches acknowledged
	// than in before, and for d to have passed.
	ackedAll := func(what string, k uint64, d time.Duration) {
		t.Helper()
		before := make([]uint64, len(fleet))
		for i, m := range fleet {
			before[i] = m.ag.Stats().Acked
		}
		start, total := time.Now(), acked()
		eventually.Within(t, time.Minute+2*d, what, func() bool {
			if time.Since(start) < d {
				return false
			}
			for i, m := range fleet {
				if m.ag.Stats().Acked < before[i]+k {
					return false
				}
			}
			return true
		})
		secs := time.Since(start).Seconds()
		rate := float64(acked()-total) / secs
		t.Logf("%s: %.0f batches acknowledged a second, about %.0f window reports (%d agents, %d breakers each) over %.1f s",
			what, rate, rate*float64(size.breakers), size.agents, size.breakers, secs)
	}

	// The calls: every breaker size.calls times a second, one in four failing.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		boom := errors.New("boom")
		tick := time.NewTicker(time.Second / time.Duration(size.calls))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, m := range fleet {
				for _, br := range m.brs {
					_ = br.Execute(context.Background(), func(context.Context) error {
						if i%4 == 0 {
							return boom
						}
						return nil
					})
				}
			}
		}
	}()

	eventually.Within(t, 2*time.Minute, "every agent connected", func() bool { return on(urls[0])+on(urls[1]) == len(fleet) })
	if on(urls[0]) == 0 || on(urls[1]) == 0 {
		t.Fatalf("the fleet did not split: %d on A, %d on B", on(urls[0]), on(urls[1]))
	}
	ackedAll("both collectors writing", 2, size.phase)

	kill := func(p *serveProc, name, to string) {
		t.Helper()
		killed := time.Now()
		if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no deferred code
			t.Fatal(err)
		}
		<-p.done
		eventually.Within(t, 2*time.Minute, "every agent on the other collector after "+name+" was killed", func() bool {
			return on(to) == len(fleet)
		})
		t.Logf("every agent moved %v after %s was killed", time.Since(killed), name)
	}
	kill(a, "A", urls[1])
	ackedAll("B alone after A's kill", 2, size.phase)
	startServeAt(t, bin, dsn, "A again", aAddr) // where B's agents move at its kill (stopped at the end by its cleanup)
	kill(b, "B", urls[0])
	ackedAll("A alone after B's kill", 2, size.phase)

	close(stop)
	wg.Wait()
	for _, m := range fleet {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.ag.Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("close agent: %v", err)
		}
		if d := m.ag.Stats().Dropped; d.Windows != 0 || d.Batches != 0 || d.Transitions != 0 {
			t.Fatalf("an agent dropped data (its buffer was too small for the test): %+v", d)
		}
	}
	for j := range size.breakers {
		name := fmt.Sprintf("dep%02d", j)
		var want breaker.Totals
		for _, m := range fleet {
			tot := m.brs[j].Snapshot().Totals
			want.Admitted += tot.Admitted
			want.Failures += tot.Failures
		}
		admitted, failures := storedCountsOf(t, dsn, cbdash.DependencyKey{Service: "soak", Breaker: name})
		if uint64(admitted) != want.Admitted || uint64(failures) != want.Failures {
			t.Errorf("%s: stored admitted %d, failures %d; the breakers counted %d and %d", name, admitted, failures, want.Admitted, want.Failures)
		}
		if j == 0 {
			t.Logf("%s: stored exactly what the breakers counted: %d calls, %d failures", name, admitted, failures)
		}
	}
}
