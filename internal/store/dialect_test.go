package store

import (
	"context"
	"strings"
	"testing"
)

// TestTheDialectsSpellingsMeanTheSameOnBothBackends runs the spellings
// that differ (greatest, least, jsonEach, lowerHex) and a placeholder
// used twice on the backend of the running suite (pgtest runs it on
// both): the same query text built by each dialect gives the same
// answer.
func TestTheDialectsSpellingsMeanTheSameOnBothBackends(t *testing.T) {
	s, err := Open(context.Background(), testDSN(t, "dialect.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.rdb.d
	query := "SELECT " + d.greatest("$1", "CAST(5 AS BIGINT)") + ", " + d.least("$1", "CAST(5 AS BIGINT)") + ", " +
		d.lowerHex("$2") + ", (SELECT count(*) FROM " + d.jsonEach("$3") + "), " +
		"(SELECT count(*) FROM " + d.jsonEach("$3") + " WHERE value IN ('b', 'c')), " +
		"$1 + $1"
	var hi, lo, sum, n, in int64
	var hex string
	err = s.rdb.QueryRowContext(context.Background(), query, int64(7), []byte{0xAB, 0x01, 0x00}, jsonStrings([]any{"a", "b", "c"})).
		Scan(&hi, &lo, &hex, &n, &in, &sum)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if hi != 7 || lo != 5 || hex != "ab0100" || n != 3 || in != 2 || sum != 14 {
		t.Errorf("greatest %d, least %d, hex %q, elements %d, of them b or c %d, $1 + $1 = %d; want 7, 5, ab0100, 3, 2, 14",
			hi, lo, hex, n, in, sum)
	}
}

// TestPlaceholdersAreNumberedRowAfterRow checks the multi-row VALUES
// placeholders of execRows: numbered from $1 across rows, left to right,
// as the flat argument list is (no "?" is rewritten any more).
func TestPlaceholdersAreNumberedRowAfterRow(t *testing.T) {
	for _, c := range []struct {
		n, cols int
		want    string
	}{
		{1, 1, "(CAST($1 AS BIGINT))"},
		{1, 3, "(CAST($1 AS BIGINT), CAST($2 AS BIGINT), CAST($3 AS BIGINT))"},
		{2, 2, "(CAST($1 AS BIGINT), CAST($2 AS BIGINT)), (CAST($3 AS BIGINT), CAST($4 AS BIGINT))"},
	} {
		if got := placeholders(c.n, c.cols, "BIGINT"); got != c.want {
			t.Errorf("placeholders(%d, %d)\n got %s\nwant %s", c.n, c.cols, got, c.want)
		}
	}
	if p := placeholders(100, 8, "BIGINT"); !strings.HasSuffix(p, "CAST($800 AS BIGINT))") || strings.Contains(p, "?") {
		t.Errorf("placeholders(100, 8) ends %q", p[len(p)-40:])
	}
	if p := placeholders(2, 2, ""); p != "($1, $2), ($3, $4)" {
		t.Errorf("placeholders(2, 2) uncast = %s", p)
	}
}
