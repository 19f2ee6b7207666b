package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
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
		{"anonymous", sqliteDialect.imUpsert(anonymousParams(named))},                // as execShapes writes them
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

// TestEveryColumnOfManyInstanceMinutesIsWrittenToItsRow writes 237
// instance minutes, each with its own calls, failures, slow, rejected
// and state, in the upsert's statements of 100, 10 and 1 rows (SQLite's
// with anonymous parameters), and reads every column of every row back.
func TestEveryColumnOfManyInstanceMinutesIsWrittenToItsRow(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t, "imrows.db")
	s, err := Open(context.Background(), dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Minute)
	states := []string{protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen}
	const n = 237
	for i := range int64(n) {
		b := protocol.Batch{Seq: 1, Windows: []protocol.Window{{Breaker: "db", Start: t0.UnixMilli(), Millis: 1000,
			State: states[i%3], Counts: protocol.Counts{Admitted: 1000 + i, Successes: 1000 - i, Failures: 2 * i, Errors: 2 * i,
				Slow: 3 * i, RejectedOpen: 5 * i}}}}
		if stored, err := s.SaveBatch(ctx, "pay", fmt.Sprintf("pay-%03d", i), 7, b, t0); err != nil || !stored {
			t.Fatalf("batch of pay-%03d: %v, %v", i, stored, err)
		}
	}
	if err := s.Close(); err != nil { // writes every sum
		t.Fatal(err)
	}
	s, err = Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.rdb.QueryContext(ctx, `SELECT i.name, m.minute, m.calls, m.failures, m.slow, m.rejected, m.state_rank
		FROM instance_minutes m JOIN instances i ON i.id = m.instance_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name string
		var minute, calls, failures, slow, rejected int64
		var rank int
		if err := rows.Scan(&name, &minute, &calls, &failures, &slow, &rejected, &rank); err != nil {
			t.Fatal(err)
		}
		var i int64
		fmt.Sscanf(name, "pay-%03d", &i)
		if minute != t0.UnixMilli() || calls != 1000+i || failures != 2*i || slow != 3*i || rejected != 5*i || rank != cbdash.StateRank(states[i%3]) {
			t.Errorf("%s: minute %d, calls %d, failures %d, slow %d, rejected %d, rank %d; want %d, %d, %d, %d, %d, %d",
				name, minute, calls, failures, slow, rejected, rank, t0.UnixMilli(), 1000+i, 2*i, 3*i, 5*i, cbdash.StateRank(states[i%3]))
		}
		seen++
	}
	if err := rows.Err(); err != nil || seen != n {
		t.Fatalf("%d rows (%v), want %d", seen, err, n)
	}
}
