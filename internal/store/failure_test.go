package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/disktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func openErr(t *testing.T, path string) error {
	t.Helper()
	s, err := store.Open(context.Background(), path, store.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded", path)
	}
	return err
}

func TestOpenExplainsPathsItCannotUse(t *testing.T) {
	t.Parallel()
	sqliteOnly(t, "file paths")
	dir := t.TempDir()
	if err := openErr(t, dir); !strings.Contains(err.Error(), dir+" is a directory, not a database file") {
		t.Errorf("directory: %v", err)
	}
	missing := filepath.Join(dir, "nope", "cbdash.db")
	if err := openErr(t, missing); !strings.Contains(err.Error(), "the folder "+filepath.Dir(missing)+" of the database "+missing+" does not exist") {
		t.Errorf("missing folder: %v", err)
	}
	if os.Geteuid() != 0 { // root writes any file whatever its mode
		ro := filepath.Join(dir, "ro.db")
		s, _ := openStore(t, store.Options{})
		s.Close()
		if err := os.WriteFile(ro, nil, 0o444); err != nil {
			t.Fatal(err)
		}
		if err := openErr(t, ro); !strings.Contains(err.Error(), "no permission to write "+ro) {
			t.Errorf("read-only file: %v", err)
		}
	}
}

func TestOpenExplainsAReadOnlyFileSystem(t *testing.T) {
	sqliteOnly(t, "a read-only file system under the database file")
	dir := disktest.Tmpfs(t, 4<<20)
	path := filepath.Join(dir, "cbdash.db")
	s, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	disktest.ReadOnly(t, dir)
	if err := openErr(t, path); !strings.Contains(err.Error(), path+" is on a read-only file system") {
		t.Errorf("read-only file system: %v", err)
	}
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, store.Options{})
	s.Close()
	db := rawDB(t, path)
	if _, err := db.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`); err != nil {
		t.Fatal(err)
	}
	err := openErr(t, path)
	if !errors.Is(err, store.ErrNewerSchema) || !strings.Contains(err.Error(), "schema is at version 99999, this build knows versions up to ") {
		t.Fatalf("newer schema: %v", err)
	}
}

// TestWritableSeesAFullDisk: a store on a full file system answers
// Writable with an error once a batch fails to commit, and recovers once
// space is freed and a write commits again.
func TestWritableSeesAFullDisk(t *testing.T) {
	sqliteOnly(t, "a full file system under the database file (TestWritableSeesPostgreSQLGoAndComeBack is PostgreSQL's)")
	dir := disktest.Tmpfs(t, 2<<20)
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(dir, "cbdash.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("fresh store: %v", err)
	}
	at := clocktest.Epoch()
	if err := s.SaveHello(ctx, hello("api", "i1", 1, "db"), at); err != nil {
		t.Fatal(err)
	}
	free := disktest.Fill(t, dir)
	// Batches big enough to need new pages, until one fails.
	var failed error
	for seq := uint64(1); seq < 200 && failed == nil; seq++ {
		b := protocol.Batch{Seq: seq}
		for i := range 500 {
			tr := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: at.UnixMilli() + int64(i),
				Cause: protocol.Cause{Kind: protocol.CauseFailureRate, Reason: strings.Repeat("x", 200)}}
			b.Transitions = append(b.Transitions, tr)
		}
		_, failed = s.SaveBatch(ctx, "api", "i1", 1, b, at)
	}
	if failed == nil {
		t.Fatal("no batch failed on a full disk")
	}
	if err := s.Writable(ctx); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("Writable on a full disk: %v", err)
	}
	free()
	if _, err := s.SaveBatch(ctx, "api", "i1", 1, protocol.Batch{Seq: 1000}, at); err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable after freeing space: %v", err)
	}
}
