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

func TestThePostgreSQLDialectRewritesOnlyWhatDiffers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"SELECT a FROM t WHERE b = ? AND c = '?'", "SELECT a FROM t WHERE b = $1 AND c = '?'"},
		{"UPDATE t SET x = max(x, ?) WHERE id = ?", "UPDATE t SET x = GREATEST(x, $1) WHERE id = $2"},
		{"SELECT max(version_id), MIN(a) FROM t", "SELECT max(version_id), MIN(a) FROM t"},
		{"SET r = min(t.r, excluded.r)", "SET r = LEAST(t.r, excluded.r)"},
		{"WHERE n IN (SELECT value FROM json_each(?))", "WHERE n IN (SELECT value FROM jsonb_array_elements_text(CAST($1 AS jsonb)))"},
		{"SELECT lower(hex(substr(hash, 1, 8)))", "SELECT lower(upper(encode(substr(hash, 1, 8), 'hex')))"},
		{"SELECT vmax(a, b), hexa(c)", "SELECT vmax(a, b), hexa(c)"},
		{"SELECT max(max(a, ?), ?)", "SELECT GREATEST(GREATEST(a, $1), $2)"},
	} {
		if got := (&dialect{postgres: true}).q(c.in); got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
		}
		if got := sqliteDialect.q(c.in); got != c.in {
			t.Errorf("SQLite changed %s to %s", c.in, got)
		}
	}
}
