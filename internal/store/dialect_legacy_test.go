package store

import "testing"

// TestTheLegacyRewriteSpellsQuestionMarkQueriesForPostgreSQL covers the
// transitional rewrite of the "?" queries (dialect_legacy.go); it goes
// with it.
func TestTheLegacyRewriteSpellsQuestionMarkQueriesForPostgreSQL(t *testing.T) {
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
		if got := (&dialect{postgres: true}).rewriteLegacy(c.in); got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
		}
		if got := sqliteDialect.q(c.in); got != c.in {
			t.Errorf("SQLite changed %s to %s", c.in, got)
		}
	}
	// q rewrites only the queries still written with "?".
	for _, c := range []struct{ in, want string }{
		{"UPDATE t SET x = ? WHERE id = ?", "UPDATE t SET x = $1 WHERE id = $2"},
		{"UPDATE t SET x = GREATEST(x, $1) WHERE id = $2", "UPDATE t SET x = GREATEST(x, $1) WHERE id = $2"},
		{"SELECT count(*) FROM t WHERE c = '?' AND id = $1", "SELECT count(*) FROM t WHERE c = '?' AND id = $1"},
		{"SELECT max(a, b) FROM t", "SELECT max(a, b) FROM t"},
	} {
		if got := (&dialect{postgres: true}).q(c.in); got != c.want {
			t.Errorf("q(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}
