package store

import (
	"compress/gzip"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/pressly/goose/v3"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestOpenMigratesADatabaseCreatedAtVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := testDSN(t, "old.db")
	d, driver, raw := sqliteDialect, "sqlite", sqliteDSN(path, true)
	if IsPostgres(path) {
		d, driver, raw = postgresDialect, "pgx", path
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(d.goose(), db, migrationsFS(d), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Data written by version 1 of the schema.
	for _, q := range []string{`INSERT INTO services (id, name, first_seen, last_seen) VALUES (1, 'pay', 1, 1)`,
		`INSERT INTO instances (id, service_id, name, started_at, first_seen, last_seen) VALUES (1, 1, 'pay-1', 7, 1, 1)`,
		`INSERT INTO instance_runs (instance_id, started_at, last_seq) VALUES (1, 7, 41)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var version int64
	if version, err = p.GetDBVersion(ctx); err != nil || version != 1 {
		t.Fatalf("db version = %d, %v; want 1", version, err)
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("Open of a version-1 database: %v", err)
	}
	defer s.Close()
	if err := s.rdb.QueryRowContext(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	sources := p.ListSources()
	if latest := sources[len(sources)-1].Version; version != latest {
		t.Fatalf("after Open the database is at version %d, want %d", version, latest)
	}
	// The old rows are intact and the new tables work.
	if seq, err := s.LastSeq(ctx, "pay", "pay-1", 7); err != nil || seq != 41 {
		t.Fatalf("LastSeq after migration = %d, %v; want 41", seq, err)
	}
	stored, err := s.SaveBatch(ctx, "pay", "pay-1", 7, protocol.Batch{Seq: 42, Windows: []protocol.Window{
		{Breaker: "db", Start: 1000, Millis: 1000, State: protocol.StateClosed}}}, fromMs(2000))
	if err != nil || !stored {
		t.Fatalf("SaveBatch after migration = %v, %v", stored, err)
	}
	if _, err := s.CreateAgentToken(ctx, "pay"); err != nil {
		t.Fatalf("agent tokens after migration: %v", err)
	}
}

// TestOpenMigratesADatabaseOfTheOldLayout opens a SQLite database that the
// cbdash before the PostgreSQL store made and migrated (its migrations at
// migrations/*.sql, now migrations/sqlite/*.sql with the same versions;
// testdata/old-layout.db.gz, at version 30, with a service, an instance
// at seq 41 and a user): it opens without a migration to apply, keeps its
// rows and takes new writes.
func TestOpenMigratesADatabaseOfTheOldLayout(t *testing.T) {
	t.Parallel()
	pgtest.SkipUnlessSQLite(t, "the old layout was SQLite's")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	gz, err := os.Open("testdata/old-layout.db.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	r, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("Open of an old-layout database: %v", err)
	}
	defer s.Close()
	if seq, err := s.LastSeq(ctx, "pay", "pay-1", 7); err != nil || seq != 41 {
		t.Fatalf("LastSeq = %d, %v; want 41", seq, err)
	}
	if _, _, err := s.UserByName(ctx, "ann"); err != nil {
		t.Fatalf("the old database's user: %v", err)
	}
	stored, err := s.SaveBatch(ctx, "pay", "pay-1", 7, protocol.Batch{Seq: 42, Windows: []protocol.Window{
		{Breaker: "db", Start: 1_700_000_001_000, Millis: 1000, State: protocol.StateClosed}}}, fromMs(1_700_000_002_000))
	if err != nil || !stored {
		t.Fatalf("SaveBatch on the old database = %v, %v", stored, err)
	}
}

// TestMigrationAdoptsTheClusterTablesOlderBuildsCreated: before migration
// 00041 the collectors' bus created cbdash_cluster_payloads and
// cbdash_cluster_routes itself (CREATE TABLE IF NOT EXISTS in
// cluster.Open). A PostgreSQL database at version 40 with those tables
// and their rows migrates to the latest version and keeps them; a fresh
// one gets them; SQLite records the version without them.
func TestMigrationAdoptsTheClusterTablesOlderBuildsCreated(t *testing.T) {
	ctx := context.Background()
	path := testDSN(t, "cluster.db")
	d, driver, raw := sqliteDialect, "sqlite", sqliteDSN(path, true)
	if IsPostgres(path) {
		d, driver, raw = postgresDialect, "pgx", path
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(d.goose(), db, migrationsFS(d), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 40); err != nil {
		t.Fatal(err)
	}
	if d.postgres {
		// What cluster.Open created before (its text, verbatim), and a route.
		for _, q := range []string{`
CREATE TABLE IF NOT EXISTS cbdash_cluster_payloads (
	id         bigserial PRIMARY KEY,
	body       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS cbdash_cluster_routes (
	service       text NOT NULL,
	instance      text NOT NULL,
	node          text NOT NULL,
	pid           integer NOT NULL,
	backend_start timestamptz NOT NULL,
	claimed_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (service, instance)
)`, `INSERT INTO cbdash_cluster_routes (service, instance, node, pid, backend_start) VALUES ('pay', 'pay-1', 'a', 7, now())`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Migrate(ctx, path, nil); err != nil {
		t.Fatalf("Migrate of a version-40 database with the bus's tables: %v", err)
	}
	var version int64
	if err := db.QueryRowContext(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version); err != nil || version < 41 {
		t.Fatalf("version after Migrate = %d, %v; want 41 or later", version, err)
	}
	var tables int
	count := `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ($1, $2)`
	if d.postgres {
		count = `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN ($1, $2)`
	}
	if err := db.QueryRowContext(ctx, count, "cbdash_cluster_payloads", "cbdash_cluster_routes").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if !d.postgres {
		if tables != 0 {
			t.Fatalf("SQLite has %d of the bus's tables, want none", tables)
		}
		return
	}
	var node string
	if err := db.QueryRowContext(ctx, "SELECT node FROM cbdash_cluster_routes WHERE service = 'pay'").Scan(&node); err != nil || node != "a" || tables != 2 {
		t.Fatalf("after Migrate: %d tables, the route's node %q, %v; want both tables and the route kept", tables, node, err)
	}
	// A fresh database gets them from the migration alone.
	fresh := pgtest.DSN(t)
	if err := Migrate(ctx, fresh, nil); err != nil {
		t.Fatal(err)
	}
	fdb, err := sql.Open("pgx", fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer fdb.Close()
	if _, err := fdb.ExecContext(ctx, `INSERT INTO cbdash_cluster_payloads (body) VALUES ('\x00'::bytea)`); err != nil {
		t.Fatalf("a fresh database after Migrate: %v", err)
	}
}

// A database at version 55 holding history at the three levels is
// migrated to the windows tables with a writer column (00056: on SQLite
// a rebuild of each table): its rows are read back as they were, under
// writer 0, and new reports add to them.
func TestOpenMigratesHistoryToRowsOfWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := testDSN(t, "v55.db")
	d, driver, raw := sqliteDialect, "sqlite", sqliteDSN(path, true)
	if IsPostgres(path) {
		d, driver, raw = postgresDialect, "pgx", path
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(d.goose(), db, migrationsFS(d), goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 55); err != nil {
		t.Fatal(err)
	}
	const hour, minute, second = 3_600_000 * 400_000, 3_600_000*400_000 + 3_600_000, 3_600_000*400_000 + 3_600_000 + 60_000
	for _, q := range []string{`INSERT INTO dependencies (id, service, breaker) VALUES (1, 'pay', 'db')`,
		`UPDATE rollups SET done_until = ` + fmt.Sprint(second) + ` WHERE level = 'second'`,
		`UPDATE rollups SET done_until = ` + fmt.Sprint(minute) + ` WHERE level = 'minute'`,
		`INSERT INTO windows_hour (dep_id, start, admitted, in_flight, open_n, reports, rejected_ramp) VALUES (1, ` + fmt.Sprint(hour) + `, 100, 4, 2, 10, 1)`,
		`INSERT INTO windows_minute (dep_id, start, admitted, in_flight, open_n, reports, misuse) VALUES (1, ` + fmt.Sprint(minute) + `, 20, 3, 1, 5, 2)`,
		`INSERT INTO windows_second (dep_id, start, admitted, in_flight, open_n, reports, latency) VALUES (1, ` + fmt.Sprint(second) + `, 7, 2, 1, 2, NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("Open of a version-55 database: %v", err)
	}
	defer s.Close()
	q := cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "db"},
		From: fromMs(hour), To: fromMs(second + 1000), Resolution: cbdash.ResolutionMinute}
	pts, err := s.History(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64][3]int64{}
	for _, p := range pts {
		got[ms(p.At)] = [3]int64{p.Counts.Admitted, p.InFlight, int64(p.Open)}
	}
	// The hour's row is read where minutes are rolled up (none here: it is
	// the minutes' level that is asked), so the minute and the second.
	want := map[int64][3]int64{minute: {20, 3, 1}, second: {7, 2, 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("minutes after the migration %v, want %v", got, want)
	}
	q.Resolution = cbdash.ResolutionHour
	if pts, err = s.History(ctx, q); err != nil || len(pts) != 2 || pts[0].Counts.Admitted != 100 || pts[0].Counts.RejectedRamp != 1 {
		t.Fatalf("hours after the migration %+v, %v; want the stored hour (100 calls) and the next", pts, err)
	}
	var writers int
	if err := s.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM windows_second WHERE writer = 0) + (SELECT count(*) FROM windows_minute WHERE writer = 0)
		+ (SELECT count(*) FROM windows_hour WHERE writer = 0)`).Scan(&writers); err != nil || writers != 3 {
		t.Fatalf("rows of writer 0: %d, %v; want 3", writers, err)
	}
	// A new report into the stored second adds to it.
	stored, err := s.SaveBatch(ctx, "pay", "pay-1", 7, protocol.Batch{Seq: 1, Windows: []protocol.Window{
		{Breaker: "db", Start: second, Millis: 1000, State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 5}, InFlight: 1}}}, fromMs(second+2000))
	if err != nil || !stored {
		t.Fatalf("SaveBatch after the migration = %v, %v", stored, err)
	}
	q.Resolution = cbdash.ResolutionSecond
	q.From = fromMs(second)
	if pts, err = s.History(ctx, q); err != nil || len(pts) != 1 || pts[0].Counts.Admitted != 12 || pts[0].InFlight != 3 {
		t.Fatalf("the second after a new report %+v, %v; want 12 calls, 3 in flight", pts, err)
	}
}
