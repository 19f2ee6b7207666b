package store

import (
	"context"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/pgtest"
)

// TestConnectionsAreNamedAfterTheDSNsApplicationName: on PostgreSQL the
// writer's and the readers' connections are "<application_name> writer"
// and "... reader" (or "cbdash ..."), so that pg_stat_activity tells
// several collectors' writers apart (bench/collectors.sh relies on it).
func TestConnectionsAreNamedAfterTheDSNsApplicationName(t *testing.T) {
	if !pgtest.Active() {
		t.Skip("PostgreSQL only")
	}
	dsn := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	name := "appname_test_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))[:20]
	s, err := Open(context.Background(), dsn+sep+"application_name="+name, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	q := s.rdb.QueryRowContext(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name IN ($1, $2)", name+" writer", name+" reader")
	if err := q.Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%d connections named %q writer or reader, want the writer and at least one reader", n, name)
	}
}
