package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cbdash/cbdash/internal/store"
)

// TestANewSQLiteDatabaseIsReadableByItsOwnerOnly: the file holds password
// hashes, sessions and webhook URLs, so a new one (and the -wal and -shm
// files SQLite makes with its mode) is 0600, whatever the umask leaves.
func TestANewSQLiteDatabaseIsReadableByItsOwnerOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cbdash.db")
	s, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		if os.IsNotExist(err) && f != path {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s has mode %v, want no access for group or others", filepath.Base(f), m)
		}
	}
}
