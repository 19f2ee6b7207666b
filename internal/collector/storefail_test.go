package collector

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for a store on PostgreSQL

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/disktest"
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

// TestABatchTheStoreAlwaysFailsIsRefusedAndTheRestGoOn: with a column of
// the transitions table renamed under the collector, a batch with a
// transition can never be stored. It is retried (the agent told to retry
// later) maxStoreAttempts times, then refused for good with its seq, and
// the window report behind it is stored.
func TestABatchTheStoreAlwaysFailsIsRefusedAndTheRestGoOn(t *testing.T) {
	h := startHarness(t, "", nil)
	driver, dsn := "sqlite", h.path+"?_pragma=busy_timeout(5000)"
	if store.IsPostgres(h.path) {
		driver, dsn = "pgx", h.path
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`); err != nil {
		t.Fatal(err)
	}
	one := h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1))
	two := h.batch(2, 7, 0)
	for attempt := 1; attempt <= maxStoreAttempts; attempt++ {
		a := dialRaw(t, h, h.token)
		if w := a.hello("a1", 1); w.LastSeq != 0 {
			t.Fatalf("attempt %d: last_seq %d", attempt, w.LastSeq)
		}
		a.send(one)
		a.send(two)
		var e protocol.Error
		a.expect(protocol.TypeError, &e)
		if attempt < maxStoreAttempts {
			if !e.Fatal || !e.Retry || !strings.Contains(e.Reason, "could not store batch") {
				t.Fatalf("attempt %d: %+v, want a fatal retry-later", attempt, e)
			}
			continue
		}
		if e.Fatal || e.Seq != 1 || !strings.Contains(e.Reason, "batch 1 could not be stored in 3 attempts") || !strings.Contains(e.Reason, "refused for good") {
			t.Fatalf("attempt %d: %+v, want batch 1 refused for good", attempt, e)
		}
		var ack protocol.Ack
		a.expect(protocol.TypeAck, &ack)
		if ack.Seq != 2 {
			t.Fatalf("ack %d, want 2", ack.Seq)
		}
	}
	pts, err := h.store.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h.now().Add(-time.Minute), To: h.now().Add(time.Minute), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
	}
	if admitted != 7 {
		t.Fatalf("stored admitted %d, want batch 2's 7", admitted)
	}
}
