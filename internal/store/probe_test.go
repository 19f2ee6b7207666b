package store_test

import (
	"context"
	"testing"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestProbeSeesASchemaTheBatchesDoNotFit: with a column renamed or a
// table gone (renamed away) of those a batch is written to, Probe and
// Writable fail, although the one-row write of store_health still
// commits (Writable used to probe only that); once repaired both are nil
// again at once, nothing of the probe's synthetic agent was ever stored,
// and the batches stored before and after are intact (the probe leaves
// the writer's caches alone).
func TestProbeSeesASchemaTheBatchesDoNotFit(t *testing.T) {
	t.Parallel()
	for _, fault := range []struct{ name, break_, repair string }{
		{"transitions column renamed", `ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`, `ALTER TABLE transitions RENAME COLUMN cause_renamed TO cause`},
		{"windows_second column renamed", `ALTER TABLE windows_second RENAME COLUMN admitted TO admitted_renamed`, `ALTER TABLE windows_second RENAME COLUMN admitted_renamed TO admitted`},
		{"data_gaps table gone", `ALTER TABLE data_gaps RENAME TO data_gaps_gone`, `ALTER TABLE data_gaps_gone RENAME TO data_gaps`},
		{"instance_minutes table gone", `ALTER TABLE instance_minutes RENAME TO instance_minutes_gone`, `ALTER TABLE instance_minutes_gone RENAME TO instance_minutes`},
		{"breakers column renamed", `ALTER TABLE breakers RENAME COLUMN config TO config_renamed`, `ALTER TABLE breakers RENAME COLUMN config_renamed TO config`},
	} {
		t.Run(fault.name, func(t *testing.T) {
			ctx := context.Background()
			s, path := openStore(t, store.Options{Clock: clockAt(t0)})
			db := rawDB(t, path)
			mustSave(t, s, "api", "a1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", t0, protocol.StateClosed, 5, 0)}})
			if err := s.Probe(ctx); err != nil {
				t.Fatalf("Probe on a healthy store: %v", err)
			}
			if _, err := db.Exec(fault.break_); err != nil {
				t.Fatal(err)
			}
			if err := s.Probe(ctx); err == nil {
				t.Fatal("Probe with the schema broken = nil")
			}
			if err := s.Writable(ctx); err == nil {
				t.Fatal("Writable with the schema broken = nil")
			}
			if _, err := db.Exec(fault.repair); err != nil {
				t.Fatal(err)
			}
			if err := s.Probe(ctx); err != nil {
				t.Fatalf("Probe after the repair: %v", err)
			}
			if err := s.Writable(ctx); err != nil {
				t.Fatalf("Writable right after a good Probe: %v", err)
			}
			mustSave(t, s, "api", "a1", 1, protocol.Batch{Seq: 2, Windows: []protocol.Window{window("db", t0, protocol.StateClosed, 7, 0)}})
			var n int
			if err := db.QueryRow(`SELECT COUNT(*) FROM services WHERE name = $1`, store.ProbeService).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d rows of the probe's service stored", n)
			}
			if last, err := s.LastSeq(ctx, "api", "a1", 1); err != nil || last != 2 {
				t.Fatalf("last seq %d %v, want 2", last, err)
			}
			var admitted int64
			if err := db.QueryRow(`SELECT COALESCE(SUM(w.admitted), 0) FROM windows_second w JOIN dependencies d ON d.id = w.dep_id
				WHERE d.service = 'api'`).Scan(&admitted); err != nil {
				t.Fatal(err)
			}
			if admitted != 12 {
				t.Fatalf("stored admitted %d, want 5+7", admitted)
			}
		})
	}
}
