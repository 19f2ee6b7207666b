package ingest

import (
	"database/sql"
	"testing"

	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/store"
)

// TestOneAgentsBatchesCannotMakeTheStoreFailing: the same error for two
// batches makes the store failing (not ready, nothing refused for good)
// only when the batches are of two different agent processes: one agent
// sending bad batches that fail alike cannot turn /readyz to 503 and
// keep the other agents' bad batches from being refused.
func TestOneAgentsBatchesCannotMakeTheStoreFailing(t *testing.T) {
	t.Parallel()
	// A real SQLite error that is not the environment's (a column the
	// statement does not find), as a batch the schema does not fit gets.
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, bad := db.Exec(`CREATE TABLE w (a INTEGER); INSERT INTO w (b) VALUES (1)`)
	if bad == nil || store.Transient(bad) {
		t.Fatalf("want an error that is not transient, got %v", bad)
	}
	a := live.Key{Service: "api", Instance: "a1"}
	b := live.Key{Service: "api", Instance: "b1"}

	h := newStoreHealth()
	h.failed(failKey{k: a, startedAt: 1, seq: 1}, bad)
	h.failed(failKey{k: a, startedAt: 1, seq: 2}, bad)
	h.failed(failKey{k: a, startedAt: 1, seq: 3}, bad)
	if h.isFailing.Load() {
		t.Fatal("three batches of one agent failing alike made the store failing")
	}
	h.failed(failKey{k: b, startedAt: 7, seq: 1}, bad)
	if !h.isFailing.Load() {
		t.Fatal("batches of two agents failing alike did not make the store failing")
	}

	h = newStoreHealth()
	h.failed(failKey{k: a, startedAt: 1, seq: 1}, bad)
	h.failed(failKey{k: a, startedAt: 2, seq: 1}, bad) // the same instance restarted: another process
	if !h.isFailing.Load() {
		t.Fatal("batches of two processes of one instance failing alike did not make the store failing")
	}
}
