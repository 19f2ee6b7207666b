package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

func TestAnonymousParamsWritesNumberedParamsInOrderAsQuestionMarks(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{placeholders(2, 2, "BIGINT"), "(CAST(? AS BIGINT), CAST(? AS BIGINT)), (CAST(? AS BIGINT), CAST(? AS BIGINT))"},
		{placeholders(1, 3, ""), "(?, ?, ?)"},
		{"($1, $3)", "($1, $3)"},   // a gap: left as it is
		{"($2, $1)", "($2, $1)"},   // out of order
		{"($1, $1)", "($1, $1)"},   // twice
		{"($1, $x)", "($1, $x)"},   // not a number
		{"(1, 2)", "(1, 2)"},       // none
		{"($9, $10)", "($9, $10)"}, // not from $1
		{"", ""},
	} {
		if got := anonymousParams(c.in); got != c.want {
			t.Errorf("anonymousParams(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	p := anonymousParams(placeholders(100, 8, "BIGINT"))
	if n := countByte(p, '?'); n != 800 || countByte(p, '$') != 0 {
		t.Errorf("100 rows of 8: %d ? and %d $ left", n, countByte(p, '$'))
	}
}

func countByte(s string, c byte) int {
	n := 0
	for i := range len(s) {
		if s[i] == c {
			n++
		}
	}
	return n
}

// BenchmarkBindInstanceMinuteUpsert runs SQLite's 100-row instance-minute
// upsert with named ($N) and anonymous (?) parameters, side by side in
// one run: what binding 800 parameters costs in modernc.org/sqlite.
func BenchmarkBindInstanceMinuteUpsert(b *testing.B) {
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "im.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE instance_minutes (dep_id INTEGER, instance_id INTEGER, minute INTEGER, calls INTEGER,
		failures INTEGER, slow INTEGER, rejected INTEGER, state_rank INTEGER, PRIMARY KEY (dep_id, minute, instance_id))`); err != nil {
		b.Fatal(err)
	}
	args := make([]any, 0, 800)
	for r := range int64(100) {
		args = append(args, r%20, r, int64(60_000), int64(10), int64(1), int64(0), int64(0), 0)
	}
	named := placeholders(100, 8, "BIGINT")
	for _, c := range []struct {
		name, query string
	}{
		{"named", strings.Replace(sqliteDialect.imUpsert("ROWS"), "ROWS", named, 1)}, // $N, as before
		{"anonymous", sqliteDialect.imUpsert(named)},
	} {
		b.Run(c.name, func(b *testing.B) {
			// In one transaction, as the writer's group: no commit each.
			tx, err := db.BeginTx(context.Background(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Rollback()
			st, err := tx.PrepareContext(context.Background(), c.query)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			for b.Loop() {
				if _, err := st.Exec(args...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
