package collector

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestACollectorThatMissedTheBusReadsTheStore: collector A counts an
// instance connected to B from B's summaries on the bus; while A's
// listening connection is down, B stores a trip of that instance, which
// A misses; once A listens again it is told of the gap and reads the
// instances' states from the store (issue 36: they stand for the other
// collectors' summaries until their next full round, which says the
// same): it shows the breaker open.
func TestACollectorThatMissedTheBusReadsTheStore(t *testing.T) {
	t.Parallel()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn := storetest.Postgres(t) // migrated: the bus opens before the stores
	clk := clocktest.NewRunning()
	ctx := context.Background()
	openBus := func(node string) cluster.Bus {
		b, err := cluster.Open(ctx, cluster.Config{URL: dsn, NodeID: node, Clock: clk, Reconnect: 4 * time.Second,
			LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	busA, busB := openBus("gapa"), openBus("gapb")
	a := startHarness(t, dsn, func(c *Config) { c.Clock, c.Cluster = clk, busA })
	b := startHarness(t, dsn, func(c *Config) { c.Clock, c.Cluster = clk, busB })

	ag := dialRaw(t, b, b.token)
	ag.hello("b1", 1)
	ag.send(b.batch(1, 10, 0))
	var ack protocol.Ack
	ag.expect(protocol.TypeAck, &ack)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	state := func() string { // b1's state in A's live view: A holds no line of it
		d, ok := a.col.live.Dependency(k)
		if !ok || d.Instances != 1 || len(d.PerInstance) != 0 {
			return ""
		}
		for st, n := range d.ByState {
			if n == 1 {
				return st
			}
		}
		return ""
	}
	eventually.True(t, "A counting b1, connected to B, closed", func() bool { return state() == protocol.StateClosed })
	resyncs := a.col.fleet.resyncs.Load()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// pg_terminate_backend only signals the backend: until it is gone it
	// may still deliver B's notification (seen once in CI), so B
	// publishes only once A's listening backend is no longer there. A
	// listens again Reconnect later.
	var pids []int32
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'cbdash-listen-gapa%'`).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	if len(pids) == 0 {
		t.Fatal("no listening connection of A found")
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "A's listening backend gone", func() bool {
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n) == nil && n == 0
	})
	ag.send(b.batch(2, 10, 10, b.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	ag.expect(protocol.TypeAck, &ack)
	eventually.True(t, "A reading the store after the gap", func() bool { return a.col.fleet.resyncs.Load() > resyncs })
	eventually.True(t, "A showing b1 open after the gap", func() bool { return state() == protocol.StateOpen })
}
