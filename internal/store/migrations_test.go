package store

import (
	"io/fs"
	"os"
	"slices"
	"testing"
)

// TestMigrationsAreTheSameVersionsOnBothBackends: every migration file is
// in both folders under the same name, so a version means the same schema
// on SQLite and PostgreSQL and adding one to a single backend fails here.
func TestMigrationsAreTheSameVersionsOnBothBackends(t *testing.T) {
	t.Parallel()
	names := func(d *dialect) []string {
		entries, err := fs.ReadDir(migrationsFS(d), ".")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	lite, pg := names(sqliteDialect), names(postgresDialect)
	if len(lite) == 0 || !slices.Equal(lite, pg) {
		t.Fatalf("migrations/sqlite has %v,\nmigrations/postgres has %v: each version goes in both", lite, pg)
	}
}

// TestNoMigrationIsLeftInTheOldFolder: a migration written for the layout
// before the PostgreSQL store (migrations/000NN_x.sql) would be embedded
// by neither backend; it belongs in migrations/sqlite and
// migrations/postgres (see doc.go).
func TestNoMigrationIsLeftInTheOldFolder(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			t.Errorf("migrations/%s: move it to migrations/sqlite and write its twin in migrations/postgres (same name)", e.Name())
		}
	}
}
