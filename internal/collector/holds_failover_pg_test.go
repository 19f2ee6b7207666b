package collector

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// skipWithoutPostgres skips a test of several collectors unless
// PostgreSQL is configured (and fails it in CI).
func skipWithoutPostgres(t *testing.T) {
	t.Helper()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
}

// twoCollectorsOnClock starts two collectors (nodes ca and cb of one cluster) on
// a new PostgreSQL schema with clk.
func twoCollectorsOnClock(t *testing.T, clk *clocktest.Running) (a, b *harness) {
	t.Helper()
	dsn := storetest.Postgres(t) // migrated: the bus opens before the stores
	start := func(node string) *harness {
		bus, err := cluster.Open(context.Background(), cluster.Config{URL: dsn, NodeID: node, Clock: clk,
			LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bus.Close() })
		return startHarness(t, dsn, func(c *Config) { c.Clock, c.Cluster = clk, bus })
	}
	return start("ca"), start("cb")
}

// TestHoldCountsOfAnInstanceThatFailsOverMidHoldAreSummedAcrossCollectors:
// an instance under a fleet-wide hold counts rejections and fallbacks on
// the collector it is connected to; that collector stops, the instance
// fails over to the other one and counts more there. The drill report,
// from the collector it moved to, counts what the breaker itself counted
// across both, exactly: the second collector's counts add to the first's
// (issue 36; they replaced them before).
func TestHoldCountsOfAnInstanceThatFailsOverMidHoldAreSummedAcrossCollectors(t *testing.T) {
	t.Parallel()
	skipWithoutPostgres(t)
	clk := clocktest.NewRunning()
	a, b := twoCollectorsOnClock(t, clk)
	ctx := context.Background()
	m := startHoldMemberOn(t, []string{a.wsURL(), b.wsURL()}, a.token, clk, "checkout", "c1", nil, "payments")
	eventually.True(t, "c1 connected", func() bool { return m.ag.Stats().Connected })
	from, to := a, b
	if m.ag.Stats().Collector == b.wsURL() {
		from, to = b, a
	}

	hold, err := from.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill the payments fallback across a failover", Actor: "ann"})
	if err != nil {
		t.Fatalf("CreateHold: %v", err)
	}
	forcedWithin(t, m, "payments", breaker.ForcedOpen, time.Now())
	before := m.breakers["payments"].Snapshot().Totals
	m.drive("payments", 7, 3)
	eventually.True(t, "the first collector counted c1's calls", func() bool {
		return sumCounts(from.col.holds.holdCounts(hold.ID)).RejectedForced == 10
	})
	from.stop() // saves what it counted

	eventually.True(t, "c1 failed over", func() bool {
		st := m.ag.Stats()
		return st.Connected && st.Collector == to.wsURL()
	})
	if m.state("payments") != breaker.ForcedOpen {
		t.Fatalf("payments is %v after the failover", m.state("payments"))
	}
	m.drive("payments", 5, 2)
	tot := m.breakers["payments"].Snapshot().Totals
	want := protocol.Counts{RejectedForced: int64(tot.RejectedForcedOpen - before.RejectedForcedOpen),
		FallbackSuccess: int64(tot.FallbackSuccesses - before.FallbackSuccesses), FallbackFailure: int64(tot.FallbackFailures - before.FallbackFailures)}
	if want.RejectedForced != 17 {
		t.Fatalf("the breaker rejected %d calls during the hold, want 17", want.RejectedForced)
	}
	var r cbdash.HoldReport
	eventually.True(t, "the report counts every rejection", func() bool {
		r, err = to.col.HoldReport(ctx, hold.ID)
		return err == nil && r.Total.Counts.RejectedForced >= want.RejectedForced
	})
	if len(r.Instances) != 1 || r.Instances[0].During.Counts != r.Total.Counts {
		t.Fatalf("report instances %+v, total %+v", r.Instances, r.Total)
	}
	got := r.Total.Counts
	if got.RejectedForced != want.RejectedForced || got.FallbackSuccess != want.FallbackSuccess || got.FallbackFailure != want.FallbackFailure {
		t.Fatalf("the report counts rejected %d, fallbacks %d served / %d failed; the breaker counted %d, %d / %d",
			got.RejectedForced, got.FallbackSuccess, got.FallbackFailure, want.RejectedForced, want.FallbackSuccess, want.FallbackFailure)
	}
	// Saved, the second collector's counts add to the first's in the store.
	to.col.holds.flushStats(ctx)
	stored, err := to.store.HoldStats(ctx, hold.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s := sumCounts(stored); s.RejectedForced != want.RejectedForced || s.FallbackSuccess != want.FallbackSuccess {
		t.Fatalf("stored counts %+v, want %+v", s, want)
	}
}
