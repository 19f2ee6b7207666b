package collector

import (
	"context"
	"database/sql"
	"encoding/json"
	"github.com/cbdash/cbdash/internal/ingest"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for a store on PostgreSQL

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/disktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

func readyz(t *testing.T, h *harness) (int, string) {
	t.Helper()
	resp, err := http.Get(h.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body["status"] + ": " + body["error"]
}

// TestFullDiskIsNotReadyAndTheAgentIsToldToRetry: on a full disk a batch
// fails to commit; the agent gets a fatal error that says retry (close
// 1011), /readyz answers 503 naming the store, and once space is freed the
// resent batch is stored and /readyz is 200 again.
func TestFullDiskIsNotReadyAndTheAgentIsToldToRetry(t *testing.T) {
	dir := disktest.Tmpfs(t, 2<<20)
	h := startHarness(t, filepath.Join(dir, "cbdash.db"), nil)
	if status, body := readyz(t, h); status != 200 {
		t.Fatalf("readyz %d %s", status, body)
	}
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	free := disktest.Fill(t, dir)
	big := h.batch(1, 10, 0)
	for i := range 1500 {
		tr := h.trans(protocol.StateClosed, protocol.StateOpen, uint64(i+1))
		tr.Cause.Reason = strings.Repeat("x", 300)
		big.Transitions = append(big.Transitions, tr)
	}
	a.send(big)
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !e.Retry || !strings.Contains(e.Reason, "could not store batch 1; retry later") {
		t.Fatalf("error %+v, want a fatal retry-later naming batch 1", e)
	}
	if _, _, err := a.next(); websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Fatalf("after the error: %v, want close 1011", err)
	}
	if status, body := readyz(t, h); status != 503 || !strings.Contains(body, "store cannot commit") || !strings.Contains(body, "full") {
		t.Fatalf("readyz on a full disk: %d %s, want 503 naming the full store", status, body)
	}
	free()
	b := dialRaw(t, h, h.token)
	if w := b.hello("a1", 1); w.LastSeq != 0 {
		t.Fatalf("last_seq %d after the failed batch", w.LastSeq)
	}
	b.send(big)
	var ack protocol.Ack
	b.expect(protocol.TypeAck, &ack)
	if ack.Seq != 1 {
		t.Fatalf("ack %d", ack.Seq)
	}
	if status, body := readyz(t, h); status != 200 {
		t.Fatalf("readyz after freeing space: %d %s", status, body)
	}
}

// poisonGeneration is the generation of a transition the poison trigger
// refuses.
const poisonGeneration = 666

// poison installs a trigger that refuses every transition of generation
// poisonGeneration: a batch carrying one fails however often it is sent,
// while every other batch (and the store's probe) is stored.
func poison(t *testing.T, h *harness, db *sql.DB) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER poison BEFORE INSERT ON transitions WHEN NEW.generation = 666
		BEGIN SELECT RAISE(ABORT, 'poisoned transition'); END`}
	if store.IsPostgres(h.path) {
		stmts = []string{`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.generation = 666 THEN RAISE EXCEPTION 'poisoned transition'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER poison BEFORE INSERT ON transitions FOR EACH ROW EXECUTE FUNCTION poison()`}
	}
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// TestABatchTheStoreAlwaysFailsIsRefusedAndTheRestGoOn: a batch the store
// always refuses (a trigger refuses its transition) while it stores the
// others and its probe succeeds is the batch's trouble: it is retried
// (the agent told to retry later, after retry_after_ms)
// ingest.MaxStoreAttempts times (the store's probe succeeding after each
// failure), then refused for good with its seq, and the
// window report behind it is stored; /readyz stays 200.
func TestABatchTheStoreAlwaysFailsIsRefusedAndTheRestGoOn(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	poison(t, h, rawStoreDB(t, h))
	bad := h.trans(protocol.StateClosed, protocol.StateOpen, poisonGeneration)
	one := h.batch(1, 10, 0, bad)
	two := h.batch(2, 7, 0)
	for attempt := 1; ; attempt++ {
		if attempt > ingest.MaxStoreAttempts {
			t.Fatalf("batch 1 still not refused after %d attempts", attempt-1)
		}
		// The batch's failure starts a probe; the decision waits for it.
		eventually.True(t, "the store probed since the last failure", h.col.ing.ProbedSinceFailures)
		a := dialRaw(t, h, h.token)
		if w := a.hello("a1", 1); w.LastSeq != 0 {
			t.Fatalf("attempt %d: last_seq %d", attempt, w.LastSeq)
		}
		a.send(one)
		a.send(two)
		var e protocol.Error
		a.expect(protocol.TypeError, &e)
		if e.Fatal {
			if !e.Retry || e.RetryAfterMillis != ingest.StoreRetryAfter.Milliseconds() || !strings.Contains(e.Reason, "could not store batch") {
				t.Fatalf("attempt %d: %+v, want a fatal retry-later after %v", attempt, e, ingest.StoreRetryAfter)
			}
			continue
		}
		if attempt < ingest.MaxStoreAttempts {
			t.Fatalf("attempt %d: %+v: refused before %d attempts", attempt, e, ingest.MaxStoreAttempts)
		}
		if e.Seq != 1 || !strings.Contains(e.Reason, "batch 1 could not be stored in 3 attempts") || !strings.Contains(e.Reason, "refused for good") {
			t.Fatalf("attempt %d: %+v, want batch 1 refused for good", attempt, e)
		}
		var ack protocol.Ack
		a.expect(protocol.TypeAck, &ack)
		if ack.Seq != 2 {
			t.Fatalf("ack %d, want 2", ack.Seq)
		}
		break
	}
	if status, body := readyz(t, h); status != 200 {
		t.Fatalf("readyz after a bad batch: %d %s, want 200 (the store is fine)", status, body)
	}
	if got := storedAdmitted(t, h); got != 7 {
		t.Fatalf("stored admitted %d, want batch 2's 7", got)
	}
}

// storedAdmitted is the calls stored for api/db around the harness's now.
func storedAdmitted(t *testing.T, h *harness) int64 {
	t.Helper()
	pts, err := h.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h.now().Add(-time.Hour), To: h.now().Add(time.Hour), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
	}
	return admitted
}
