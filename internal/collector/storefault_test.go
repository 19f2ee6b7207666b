package collector

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/ingest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// schemaFault is a change an operator makes to the database under a
// running collector (the schema version unchanged) and its repair.
type schemaFault struct{ name, apply, repair string }

var schemaFaults = []schemaFault{
	{"a column of windows_second renamed",
		`ALTER TABLE windows_second RENAME COLUMN admitted TO admitted_renamed`,
		`ALTER TABLE windows_second RENAME COLUMN admitted_renamed TO admitted`},
	{"a column of transitions renamed",
		`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`,
		`ALTER TABLE transitions RENAME COLUMN cause_renamed TO cause`},
	// A table gone from under the writer ("no such table" / 42P01), as a
	// DROP makes it, but restorable with its rows and constraints.
	{"the transitions table gone",
		`ALTER TABLE transitions RENAME TO transitions_gone`,
		`ALTER TABLE transitions_gone RENAME TO transitions`},
}

func exec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// execWhileWriting is exec for a statement that takes locks on tables
// the collector is writing to (a fault set up under it): PostgreSQL may
// pick it as a deadlock's victim (SQLSTATE 40P01), which rolls it back
// whole, so it is run again until it goes through.
func execWhileWriting(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		_, err := db.Exec(q)
		var pe *pgconn.PgError
		if err == nil {
			return
		}
		if !errors.As(err, &pe) || pe.Code != "40P01" || attempt == 20 {
			t.Fatalf("%s: %v", q, err)
		}
		t.Logf("deadlock victim (attempt %d), running it again", attempt)
	}
}

// TestAStoreThatFailsEveryBatchNeverRefusesOne: with the schema broken
// under the collector, a batch with a transition and a window report
// fails on every attempt, and so does the store's probe: the agent is
// told to retry later (after retry_after_ms) far more than
// ingest.MaxStoreAttempts times and never that the batch is refused, /readyz
// answers 503 throughout; once repaired, with no agent sending, one
// probe period on the collector's clock (StoreProbeEvery) makes /readyz
// 200, and the resent batch is stored. (The collector used to refuse
// the batch for good at the third attempt and stay ready.)
func TestAStoreThatFailsEveryBatchNeverRefusesOne(t *testing.T) {
	for _, f := range schemaFaults {
		t.Run(f.name, func(t *testing.T) {
			clk := clocktest.Virtual()
			h := startHarness(t, "", func(c *Config) { c.Clock = clk })
			db := rawStoreDB(t, h)
			if status, body := readyz(t, h); status != 200 {
				t.Fatalf("readyz %d %s", status, body)
			}
			exec(t, db, f.apply)
			one := h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1))
			for attempt := 1; attempt <= 3*ingest.MaxStoreAttempts; attempt++ {
				a := dialRaw(t, h, h.token)
				if w := a.hello("a1", 1); w.LastSeq != 0 {
					t.Fatalf("attempt %d: last_seq %d", attempt, w.LastSeq)
				}
				a.send(one)
				var e protocol.Error
				a.expect(protocol.TypeError, &e)
				if !e.Fatal || !e.Retry || e.RetryAfterMillis != 1000 || !strings.Contains(e.Reason, "could not store batch 1; retry later") {
					t.Fatalf("attempt %d: %+v, want a fatal retry-later after 1000 ms", attempt, e)
				}
				a.conn.CloseNow()
				// The failure starts a probe at once; it fails too.
				eventually.True(t, "readyz 503 while the schema is broken", func() bool {
					status, body := readyz(t, h)
					return status == 503 && strings.Contains(body, "store cannot commit")
				})
			}
			exec(t, db, f.repair)
			if status, body := readyz(t, h); status != 503 {
				t.Fatalf("readyz right after the repair, before any probe: %d %s", status, body)
			}
			// Nothing is sent: only the collector's own probe, due
			// StoreProbeEvery after the last one, can see the store back.
			var advanced time.Duration
			eventually.True(t, "readyz 200 once the store is repaired", func() bool {
				if status, _ := readyz(t, h); status == 200 {
					return true
				}
				clk.Advance(50 * time.Millisecond)
				advanced += 50 * time.Millisecond
				return false
			})
			t.Logf("ready %v (collector's clock) after the repair", advanced)
			if advanced > time.Second {
				t.Fatalf("readyz 200 only %v after the repair, want within 1 s", advanced)
			}
			a := dialRaw(t, h, h.token)
			a.hello("a1", 1)
			a.send(one)
			var ack protocol.Ack
			a.expect(protocol.TypeAck, &ack)
			if ack.Seq != 1 {
				t.Fatalf("ack %d, want 1", ack.Seq)
			}
			if got := storedAdmitted(t, h); got != 10 {
				t.Fatalf("stored admitted %d, want 10", got)
			}
		})
	}
}

// TestHelloRefusedForTheStoreSaysWhenToComeBack: a hello the store cannot
// record (a column of breakers renamed) is refused with a fatal
// retry-later error that carries retry_after_ms, and /readyz answers 503.
func TestHelloRefusedForTheStoreSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	exec(t, rawStoreDB(t, h), `ALTER TABLE breakers RENAME COLUMN config TO config_renamed`)
	a := dialRaw(t, h, h.token)
	a.send(rawHello("a1", 1))
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !e.Retry || e.RetryAfterMillis != ingest.StoreRetryAfter.Milliseconds() || !strings.Contains(e.Reason, "could not record the hello") {
		t.Fatalf("%+v, want a fatal retry-later after %v", e, ingest.StoreRetryAfter)
	}
	eventually.True(t, "readyz 503", func() bool { status, _ := readyz(t, h); return status == 503 })
}

// batchesCounted reads a counter of the collector's batches metric.
func batchesCounted(t *testing.T, h *harness, outcome string) float64 {
	t.Helper()
	return h.col.ing.Batches(outcome)
}

// TestRealAgentsLoseNothingWhileTheSchemaIsBroken: real agents stream
// calls and transitions to a collector whose schema is broken under it
// (a column renamed, a table gone) for long enough that every batch
// failed several times ingest.MaxStoreAttempts over; /readyz answers 503 from
// the first failure to the repair, no batch is ever refused, and once
// the schema is repaired the store holds exactly the calls and the
// transitions the breakers made (the collector used to refuse the
// batches for good: 143,025 calls and 500 transitions lost in 20 s).
func TestRealAgentsLoseNothingWhileTheSchemaIsBroken(t *testing.T) {
	t.Parallel()
	for _, f := range schemaFaults {
		t.Run(f.name, func(t *testing.T) {
			h := startHarness(t, "", nil)
			db := rawStoreDB(t, h)
			members := []*fleetMember{startMember(t, h, "a1", nil), startMember(t, h, "a2", nil)}
			var gen0 int64 // the generations the breakers started in
			for _, m := range members {
				gen0 += int64(m.br.Snapshot().Generation)
			}
			var budget atomic.Int64 // transition cycles left, for all members
			budget.Store(2)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, m := range members {
				wg.Go(func() {
					ctx := context.Background()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						// A cycle every 3000 calls while the budget lasts:
						// each moves the breaker's clock 6 s ahead, and its
						// transitions must stay within
						// protocol.MaxFutureSkewMillis of the collector's.
						if i%3000 == 0 && budget.Add(-1) >= 0 {
							// closed > open > half_open > closed, as
							// fleetMember.cycle (which may not fail the test
							// from this goroutine).
							for range 100 { // the whole count window: it trips
								_ = m.br.Execute(ctx, func(context.Context) error { return errBoom })
							}
							m.clock.Advance(6 * time.Second)
							_ = m.br.Execute(ctx, func(context.Context) error { return nil })
							continue
						}
						_ = m.br.Execute(ctx, func(context.Context) error { return nil })
						if i%20 == 0 {
							runtime.Gosched() // the agents and the collector share the cores
						}
					}
				})
			}
			acked := func(n uint64) func() bool {
				return func() bool {
					for _, m := range members {
						if m.ag.Stats().Acked < n {
							return false
						}
					}
					return true
				}
			}
			eventually.True(t, "batches acknowledged", acked(3))
			exec(t, db, f.apply)
			budget.Store(20) // transitions during the fault
			eventually.True(t, "readyz 503 once the fault is seen", func() bool { status, _ := readyz(t, h); return status == 503 })
			failedAt := batchesCounted(t, h, "failed")
			var reconnects []uint64
			for _, m := range members {
				reconnects = append(reconnects, m.ag.Stats().Reconnects)
			}
			// Every reconnection follows a fatal store error on a batch
			// the agent then resends first.
			eventually.True(t, "every agent's batch failed more than ingest.MaxStoreAttempts times", func() bool {
				if status, body := readyz(t, h); status != 503 {
					t.Fatalf("readyz %d %s during the fault, want 503", status, body)
				}
				for i, m := range members {
					if m.ag.Stats().Reconnects < reconnects[i]+ingest.MaxStoreAttempts+1 {
						return false
					}
				}
				return true
			})
			exec(t, db, f.repair)
			eventually.True(t, "readyz 200 after the repair", func() bool { status, _ := readyz(t, h); return status == 200 })
			var before []uint64
			for _, m := range members {
				before = append(before, m.ag.Stats().Acked)
			}
			eventually.True(t, "batches acknowledged after the repair", func() bool {
				for i, m := range members {
					if m.ag.Stats().Acked < before[i]+3 {
						return false
					}
				}
				return true
			})
			close(stop)
			wg.Wait()
			var wantCalls, wantTransitions int64
			for _, m := range members {
				m.close(t)
				snap := m.br.Snapshot()
				wantCalls += int64(snap.Totals.Admitted)
				wantTransitions += int64(snap.Generation) // one a transition, from gen0
				if d := m.ag.Stats().Dropped; !d.IsZero() {
					t.Errorf("agent dropped %+v", d)
				}
			}
			wantTransitions -= gen0
			if got := batchesCounted(t, h, "refused"); got != 0 {
				t.Errorf("%v batches refused", got)
			}
			if got := storedAdmitted(t, h); got != wantCalls {
				t.Errorf("stored %d calls, the breakers made %d", got, wantCalls)
			}
			var gotTransitions int64
			if err := db.QueryRow(`SELECT COUNT(*) FROM transitions WHERE service = 'api'`).Scan(&gotTransitions); err != nil {
				t.Fatal(err)
			}
			if gotTransitions != wantTransitions {
				t.Errorf("stored %d transitions, the breakers made %d", gotTransitions, wantTransitions)
			}
			t.Logf("%d calls and %d transitions, %v batch failures during the fault, all stored after the repair",
				wantCalls, wantTransitions, batchesCounted(t, h, "failed")-failedAt)
		})
	}
}

// TestHTTPIngestWhileTheSchemaIsBroken: over HTTP ingest a batch the
// broken store cannot take is answered 503 with Retry-After: 1 on every
// attempt, never 400 (refused for good, as it used to be at the third);
// once repaired the same body is stored.
func TestHTTPIngestWhileTheSchemaIsBroken(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	db := rawStoreDB(t, h)
	exec(t, db, schemaFaults[1].apply)
	body, err := json.Marshal(protocol.IngestRequest{Hello: rawHello("h1", 5), Batch: h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1))})
	if err != nil {
		t.Fatal(err)
	}
	post := func() (int, string, string) {
		req, err := http.NewRequest("POST", h.srv.URL+"/api/v1/ingest", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(data)
	}
	for attempt := 1; attempt <= 3*ingest.MaxStoreAttempts; attempt++ {
		if status, after, data := post(); status != 503 || after != "1" {
			t.Fatalf("attempt %d: %d (Retry-After %q) %s, want 503 with Retry-After 1", attempt, status, after, data)
		}
	}
	exec(t, db, schemaFaults[1].repair)
	if status, _, data := post(); status != 200 || !strings.Contains(data, `"acked_seq":1`) {
		t.Fatalf("after the repair: %d %s", status, data)
	}
	if got := storedAdmitted(t, h); got != 10 {
		t.Fatalf("stored admitted %d, want 10", got)
	}
}
