package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestTwoStoresOnOnePostgreSQLStoreEachBatchOnceAndSumExactly: two
// processes' stores on one PostgreSQL database (as two collectors would
// be) each receive every batch of one agent (an agent that failed over and
// resent), and other agents' reports into the same dependency-seconds
// through either: each batch is stored once, and the history sums are
// exact, also after one of them compacts.
func TestTwoStoresOnOnePostgreSQLStoreEachBatchOnceAndSumExactly(t *testing.T) {
	t.Parallel()
	dsn := storetest.Path(t)
	if !store.IsPostgres(dsn) {
		t.Skip("PostgreSQL only: a SQLite file has one server")
	}
	a := storetest.OpenFile(t, dsn, store.Options{})
	b := storetest.OpenFile(t, dsn, store.Options{})
	ctx := context.Background()
	stores := []*store.Store{a, b}
	const seqs, agents = 30, 4
	for i, s := range stores {
		for n := range agents {
			if err := s.SaveHello(ctx, hello("pay", fmt.Sprintf("pay-%d", n), 1, "db"), t0); err != nil {
				t.Fatalf("store %d: %v", i, err)
			}
		}
	}
	var stored atomic.Int64
	var wg sync.WaitGroup
	for n := range agents {
		for _, s := range stores {
			wg.Go(func() {
				inst := fmt.Sprintf("pay-%d", n)
				for seq := uint64(1); seq <= seqs; seq++ {
					w := window("db", t0.Add(time.Duration(seq)*time.Second), protocol.StateClosed, 10, 1)
					ok, err := s.SaveBatch(ctx, "pay", inst, 1, protocol.Batch{Seq: seq, Windows: []protocol.Window{w}}, t0)
					if err != nil {
						t.Errorf("%s seq %d: %v", inst, seq, err)
						return
					}
					if ok {
						stored.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := stored.Load(); got != seqs*agents {
		t.Fatalf("%d batches stored, want %d: each once", got, seqs*agents)
	}
	check := func(when string) {
		t.Helper()
		pts, err := b.History(ctx, cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "db"},
			From: t0, To: t0.Add(time.Hour), Resolution: cbdash.ResolutionMinute})
		if err != nil {
			t.Fatal(err)
		}
		var calls int64
		for _, p := range pts {
			calls += p.Counts.Admitted
		}
		if want := int64(seqs * agents * 11); calls != want {
			t.Fatalf("%s: history counts %d calls, want %d", when, calls, want)
		}
	}
	check("before compaction")
	if err := a.Compact(ctx, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A late resend through the other store, after the roll-up: a duplicate.
	if ok, err := b.SaveBatch(ctx, "pay", "pay-0", 1, protocol.Batch{Seq: 3, Windows: []protocol.Window{
		window("db", t0.Add(3*time.Second), protocol.StateClosed, 10, 1)}}, t0); err != nil || ok {
		t.Fatalf("late resend = %v, %v; want a duplicate", ok, err)
	}
	check("after compaction")
}
