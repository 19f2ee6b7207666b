package collector

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/disktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// slowBackoff is the recovering agents' backoff: a minute, so that an
// agent back within recoveryBound came back because the collector said
// when (retry_after_ms) or because nothing listened (a refused dial is
// retried within a second), never by its own backoff (at least 30 s with
// jitter).
const slowBackoff = time.Minute

// recoveryBound is the most a recovering agent may take to be acked
// again after the fault ends: half the shortest wait its own backoff
// could give it. On a quiet machine it is about a second (logged).
const recoveryBound = slowBackoff / 4

// recoveringAgent is a real agent with a minute's backoff, its breaker
// called every few milliseconds so that it always has a batch to send.
type recoveringAgent struct {
	ag      *agent.Agent
	br      *breaker.Breaker
	dials   atomic.Int64
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// close stops the calls and closes the agent (flushing what it holds
// while its collector still runs); later calls do nothing.
func (ra *recoveringAgent) close() {
	ra.once.Do(func() {
		close(ra.stop)
		<-ra.stopped
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ra.ag.Close(ctx)
	})
}

// runningClock is the harness's running clock as a breaker's: its
// windows close as the collector's time passes.
type runningClock struct{ clock.Clock }

func (c runningClock) AfterFunc(d time.Duration, f func()) breaker.Timer { return time.AfterFunc(d, f) }

// startRecoveringAgents starts n agents of service "api" reporting to
// wsURL with token, on the harness's clock.
func startRecoveringAgents(t *testing.T, clk clock.Clock, wsURL, token string, n int) []*recoveringAgent {
	t.Helper()
	var out []*recoveringAgent
	for i := range n {
		ra := &recoveringAgent{stop: make(chan struct{}), stopped: make(chan struct{})}
		br, err := breaker.New("db", breaker.Config{MinimumCalls: 10, FailureRateThreshold: 50, Clock: runningClock{clk}})
		if err != nil {
			t.Fatal(err)
		}
		d := &net.Dialer{}
		ag, err := agent.New(agent.Config{
			URL: wsURL, Token: token, Service: "api", Instance: fmt.Sprintf("r%d", i),
			ReportInterval: 50 * time.Millisecond, ReconnectMin: slowBackoff, ReconnectMax: slowBackoff, Clock: clk,
			HTTPClient: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ra.dials.Add(1)
				return d.DialContext(ctx, network, addr)
			}}},
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
		ra.ag, ra.br = ag, br
		go func() {
			defer close(ra.stopped)
			tick := time.NewTicker(5 * time.Millisecond) // traffic, not a wait
			defer tick.Stop()
			for {
				select {
				case <-ra.stop:
					return
				case <-tick.C:
					_ = br.Execute(context.Background(), func(context.Context) error { return nil })
				}
			}
		}()
		t.Cleanup(ra.close)
		out = append(out, ra)
	}
	return out
}

// ackedAgain waits until every agent has an acknowledgement it did not
// have at the call, and returns how long the slowest took.
func ackedAgain(t *testing.T, agents []*recoveringAgent) time.Duration {
	t.Helper()
	start := time.Now()
	before := make([]uint64, len(agents))
	for i, a := range agents {
		before[i] = a.ag.Stats().Acked
	}
	var mu sync.Mutex
	took := make([]time.Duration, len(agents))
	eventually.True(t, "every agent acknowledged again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		done := true
		for i, a := range agents {
			if took[i] == 0 && a.ag.Stats().Acked > before[i] {
				took[i] = time.Since(start)
			}
			done = done && took[i] > 0
		}
		return done
	})
	slowest := slices.Max(took)
	t.Logf("every agent acknowledged again within %v of the fault's end (each: %v)", slowest.Round(time.Millisecond), took)
	if slowest > recoveryBound {
		t.Fatalf("an agent was acknowledged again only %v after the fault ended, want within %v (its own backoff is %v)", slowest, recoveryBound, slowBackoff)
	}
	for _, a := range agents {
		if d := a.ag.Stats().Dropped; !d.IsZero() {
			t.Errorf("an agent dropped %+v", d)
		}
	}
	return slowest
}

// refusedDuringFault waits until every agent has been sent away at least
// twice since the call (fatal retry-later errors, each answered by a new
// connection after retry_after_ms): the fault is seen, and the agents
// keep coming back to find out whether it has ended.
func refusedDuringFault(t *testing.T, h *harness, agents []*recoveringAgent) {
	t.Helper()
	before := make([]int64, len(agents))
	for i, a := range agents {
		before[i] = a.dials.Load()
	}
	eventually.True(t, "readyz 503 and every agent sent away twice", func() bool {
		if status, _ := readyz(t, h); status != 503 {
			return false
		}
		for i, a := range agents {
			if a.dials.Load() < before[i]+2 {
				return false
			}
		}
		return true
	})
}

// TestAgentsAreBackWithinSecondsOfTheStore: after a fault of the store
// (a full disk; PostgreSQL unreachable; PostgreSQL refusing writes) or
// of the collector (not started when its agents were), every agent is
// acknowledged again within seconds of the fault's end, though its own
// backoff is a minute: the collector tells the agents it sends away for
// its store's sake when to come back (retry_after_ms), and an agent
// retries a dial nothing answered within a second. They used to come
// back 15-31 s later, at their backoff.
func TestAgentsAreBackWithinSecondsOfTheStore(t *testing.T) {
	t.Run("disk full", func(t *testing.T) {
		pgtest.SkipUnlessSQLite(t, "a full disk under the SQLite file")
		dir := disktest.Tmpfs(t, 4<<20)
		h := startHarness(t, filepath.Join(dir, "cbdash.db"), nil)
		agents := startRecoveringAgents(t, h.clk, h.wsURL(), h.token, 3)
		ackedAgain(t, agents)
		free := disktest.Fill(t, dir)
		refusedDuringFault(t, h, agents)
		free()
		ackedAgain(t, agents)
	})
	t.Run("collector down at start", func(t *testing.T) {
		pgtest.SkipUnlessSQLite(t, "one collector restarted on its address")
		path := storetest.Path(t)
		first := startHarness(t, path, nil)
		addr, token := first.srv.Listener.Addr().String(), first.token
		first.stop()
		agents := startRecoveringAgents(t, first.clk, first.wsURL(), token, 3)
		eventually.True(t, "every agent's dial refused twice", func() bool {
			for _, a := range agents {
				if a.dials.Load() < 2 {
					return false
				}
			}
			return true
		})
		startHarnessOn(t, path, addr, first.restartOpts)
		ackedAgain(t, agents)
		for _, a := range agents {
			a.close() // before the collector's cleanup, started after theirs, stops it
		}
	})
	t.Run("PostgreSQL unreachable", func(t *testing.T) {
		if os.Getenv(pgtest.EnvDSN) == "" {
			t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
		}
		dsn, r := relayedPostgres(t)
		h := startHarness(t, dsn, nil)
		agents := startRecoveringAgents(t, h.clk, h.wsURL(), h.token, 3)
		ackedAgain(t, agents)
		r.cut()
		refusedDuringFault(t, h, agents)
		r.restore()
		ackedAgain(t, agents)
	})
	t.Run("PostgreSQL refusing writes", func(t *testing.T) {
		if os.Getenv(pgtest.EnvDSN) == "" {
			t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
		}
		h := startHarness(t, pgtest.DSN(t), nil)
		db := rawStoreDB(t, h)
		var schema string
		if err := db.QueryRow(`SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		agents := startRecoveringAgents(t, h.clk, h.wsURL(), h.token, 3)
		ackedAgain(t, agents)
		// The database made read-only under the collector (its role is
		// a superuser in CI, so privileges cannot do it): every write
		// to a table of its schema fails as in a read-only transaction
		// (SQLSTATE 25006), until the triggers are dropped.
		exec(t, db, `CREATE FUNCTION `+schema+`.read_only() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP USING ERRCODE = '25006'; END $$`)
		execWhileWriting(t, db, `DO $$ DECLARE r record; BEGIN
			FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = '`+schema+`' LOOP
				EXECUTE format('CREATE TRIGGER read_only BEFORE INSERT OR UPDATE OR DELETE ON %I.%I FOR EACH ROW EXECUTE FUNCTION %I.read_only()', '`+schema+`', r.tablename, '`+schema+`');
			END LOOP; END $$`)
		refusedDuringFault(t, h, agents)
		execWhileWriting(t, db, `DO $$ DECLARE r record; BEGIN
			FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = '`+schema+`' LOOP
				EXECUTE format('DROP TRIGGER read_only ON %I.%I', '`+schema+`', r.tablename);
			END LOOP; END $$`)
		ackedAgain(t, agents)
	})
}
