package store

import (
	"context"
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
