package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// database creates a database of the test's own on the PostgreSQL of
// CBDASH_TEST_POSTGRES, migrated by the store (which owns the bus's
// tables), and returns its URL; it is dropped at the end. Without the
// variable the test is skipped, except under CI=true.
func database(t *testing.T) string { return benchDatabase(t) }

func benchDatabase(t testing.TB) string {
	t.Helper()
	db := emptyDatabase(t)
	migrate(t, db)
	return db
}

// migrate has the store migrate the database at dbURL.
func migrate(t testing.TB, dbURL string) {
	t.Helper()
	if err := store.Migrate(context.Background(), dbURL, nil); err != nil {
		t.Fatalf("migrating %s: %v", store.MaskDSN(dbURL), err)
	}
}

// emptyDatabase is database without the migrations.
func emptyDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("CBDASH_TEST_POSTGRES")
	if admin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CBDASH_TEST_POSTGRES is not set (CI=true): the cluster tests need a PostgreSQL")
		}
		t.Skip("CBDASH_TEST_POSTGRES is not set: no PostgreSQL to test the cluster bus on")
	}
	name := "cbdash_" + strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "_"))
	if len(name) > 60 {
		name = name[:60]
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connecting to CBDASH_TEST_POSTGRES: %v", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func open(t *testing.T, dbURL, node string) *cluster.Postgres { return openB(t, dbURL, node) }

func openB(t testing.TB, dbURL, node string) *cluster.Postgres {
	t.Helper()
	b, err := cluster.Open(context.Background(), cluster.Config{
		URL: dbURL, NodeID: node, Clock: clocktest.NewRunning(),
		LeaderRetry: 100 * time.Millisecond, LeaderCheck: 100 * time.Millisecond, Reconnect: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// exec runs sql on its own connection.
func exec(t *testing.T, dbURL, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// payload is the i-th message of node: every 10th is larger than a
// NOTIFY may be, every 25th binary (with NUL bytes): both go by reference.
func payload(node string, i int) []byte {
	p := []byte(fmt.Sprintf("%s-%d", node, i))
	switch {
	case i%25 == 0:
		p = append(p, 0, 1, 2, 0xff)
	case i%10 == 0:
		p = append(p, bytes.Repeat([]byte("x"), 20000)...)
	}
	return p
}

func TestTwoNodesSeeEachOthersEventsInOrder(t *testing.T) {
	db := database(t)
	a, b := open(t, db, "a"), open(t, db, "b")
	const n = 200
	type sub struct {
		bus  *cluster.Postgres
		msgs <-chan cluster.Message
	}
	subs := map[string]sub{}
	for _, bus := range []*cluster.Postgres{a, b} {
		msgs, cancel := bus.Subscribe("events")
		defer cancel()
		subs[bus.NodeID()] = sub{bus, msgs}
	}
	other, cancelOther := b.Subscribe("other")
	defer cancelOther()
	var wg sync.WaitGroup
	for _, bus := range []*cluster.Postgres{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= n; i++ {
				if err := bus.Publish(context.Background(), "events", payload(bus.NodeID(), i)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for node, s := range subs {
		from := map[string]string{"a": "b", "b": "a"}[node]
		timeout := time.NewTimer(30 * time.Second) // real time: the database's delivery
		for i := 1; i <= n; i++ {
			select {
			case m := <-s.msgs:
				if m.From != from || m.Channel != "events" || m.Gap || !bytes.Equal(m.Payload, payload(from, i)) {
					t.Fatalf("node %s message %d: from %q on %q, %.40q; want %s's %.40q", node, i, m.From, m.Channel, m.Payload, from, payload(from, i))
				}
			case <-timeout.C:
				t.Fatalf("node %s received %d of %s's %d messages", node, i-1, from, n)
			}
		}
		timeout.Stop()
		select {
		case m := <-s.msgs:
			t.Fatalf("node %s received more: %+v", node, m)
		default:
		}
	}
	select {
	case m := <-other:
		t.Fatalf("a subscriber of another channel received %+v", m)
	default:
	}
}

func TestRouteReachesTheNodeHoldingTheInstance(t *testing.T) {
	db := database(t)
	a, b := open(t, db, "a"), open(t, db, "b")
	ctx := context.Background()
	atB, cancelB := b.Subscribe("commands")
	defer cancelB()
	atA, cancelA := a.Subscribe("commands")
	defer cancelA()
	if err := a.Route(ctx, "commands", "api", "i1", []byte("force_open")); !errors.Is(err, cluster.ErrNoRoute) {
		t.Fatalf("route to an instance nobody holds: %v, want ErrNoRoute", err)
	}
	if err := b.Claim(ctx, "api", "i1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Route(ctx, "commands", "api", "i1", []byte("force_open")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-atB:
		if m.From != "a" || string(m.Payload) != "force_open" {
			t.Fatalf("b received %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the routed command did not reach b")
	}
	// The instance moves to a: b's late release leaves a's claim.
	if err := a.Claim(ctx, "api", "i1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "api", "i1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Route(ctx, "commands", "api", "i1", []byte("release")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-atA:
		if m.From != "b" || string(m.Payload) != "release" {
			t.Fatalf("a received %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the routed command did not reach a")
	}
	// Routed to the node itself: its own subscribers.
	if err := a.Route(ctx, "commands", "api", "i1", []byte("reset")); err != nil {
		t.Fatal(err)
	}
	if m := <-atA; m.From != "a" || string(m.Payload) != "reset" {
		t.Fatalf("a received %+v", m)
	}
	// A node that dies holds no route: its listening connection is gone.
	if err := b.Claim(ctx, "api", "i2"); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	eventually.True(t, "no route to the closed node's instance", func() bool {
		return errors.Is(a.Route(ctx, "commands", "api", "i2", nil), cluster.ErrNoRoute)
	})
}

// TestLeaderMovesWhenItsConnectionIsTerminated: of two nodes leading the
// same singleton, one runs it; its lock's connection is terminated
// (pg_terminate_backend); the other takes over within a few seconds, and
// the former leader's fn has been stopped.
func TestLeaderMovesWhenItsConnectionIsTerminated(t *testing.T) {
	db := database(t)
	a, b := open(t, db, "a"), open(t, db, "b")
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	running := map[string]int{}
	var wg sync.WaitGroup
	for _, bus := range []*cluster.Postgres{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = bus.Lead(ctx, "incidents", func(lctx context.Context) {
				mu.Lock()
				running[bus.NodeID()]++
				mu.Unlock()
				<-lctx.Done()
				mu.Lock()
				running[bus.NodeID()]--
				mu.Unlock()
			})
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	one := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if running["a"]+running["b"] != 1 || a.Leading("incidents") == b.Leading("incidents") {
			return "", false
		}
		if running["a"] == 1 {
			return "a", true
		}
		return "b", true
	}
	eventually.True(t, "one leader", func() bool { _, ok := one(); return ok })
	first, _ := one()
	start := time.Now() // real time: the lock moves on the database's time
	exec(t, db, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	eventually.True(t, "the other node leading", func() bool { l, ok := one(); return ok && l != first })
	took := time.Since(start)
	t.Logf("leadership moved from %s in %v (real time)", first, took)
	if took > 5*time.Second {
		t.Fatalf("leadership took %v to move", took)
	}
}

// TestSubscribersAreToldOfAGap: when a node's listening connection is
// lost, its subscribers get a Gap message once it is back, and messages
// flow again.
func TestSubscribersAreToldOfAGap(t *testing.T) {
	db := database(t)
	a, b := open(t, db, "a"), open(t, db, "b")
	msgs, cancel := b.Subscribe("events")
	defer cancel()
	exec(t, db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'cbdash-listen-b'`)
	deadline := time.After(10 * time.Second)
	for gap := false; !gap; {
		select {
		case m := <-msgs:
			gap = m.Gap
		case <-deadline:
			t.Fatal("no gap message after the listening connections were terminated")
		}
	}
	var got cluster.Message
	eventually.True(t, "a message after the gap", func() bool {
		if err := a.Publish(context.Background(), "events", []byte("again")); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-msgs:
			return !got.Gap
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	if string(got.Payload) != "again" {
		t.Fatalf("after the gap: %+v", got)
	}
}

func TestLocal(t *testing.T) {
	l := cluster.NewLocal()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- l.Lead(ctx, "compaction", func(context.Context) { close(ran) }) }()
	<-ran
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := l.Route(context.Background(), "commands", "api", "i1", nil); !errors.Is(err, cluster.ErrNoRoute) {
		t.Fatalf("route to an instance not claimed: %v, want ErrNoRoute", err)
	}
	cmds, cancelCmds := l.Subscribe("commands")
	defer cancelCmds()
	if err := l.Claim(context.Background(), "api", "i1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Route(context.Background(), "commands", "api", "i1", []byte("reset")); err != nil {
		t.Fatal(err)
	}
	if m := <-cmds; string(m.Payload) != "reset" {
		t.Fatalf("routed %+v", m)
	}
	if err := l.Publish(context.Background(), "Bad-Name", nil); !errors.Is(err, cluster.ErrInvalid) {
		t.Fatalf("publish on a bad channel: %v, want ErrInvalid", err)
	}
	msgs, _ := l.Subscribe("events")
	_ = l.Close()
	if _, ok := <-msgs; ok {
		t.Fatal("a subscriber's channel stays open after Close")
	}
	bus, err := cluster.ForStore(context.Background(), "/var/lib/cbdash/cbdash.db", cluster.Config{})
	if _, local := bus.(*cluster.Local); err != nil || !local {
		t.Fatalf("ForStore of an SQLite file: %T, %v", bus, err)
	}
	_ = bus.Close()
}

func TestConfigIsValidated(t *testing.T) {
	for _, c := range []struct {
		name, field string
		cfg         cluster.Config
	}{
		{"no URL", "URL", cluster.Config{}},
		{"bad node id", "NodeID", cluster.Config{URL: "postgres://x/y", NodeID: "Node-1"}},
		{"negative retry", "LeaderRetry", cluster.Config{URL: "postgres://x/y", LeaderRetry: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := cluster.Open(context.Background(), c.cfg)
			if !errors.Is(err, cluster.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err %v, want ErrInvalid naming %s", err, c.field)
			}
		})
	}
}

// inSchema returns dbURL with its connections in a new schema name,
// migrated by the store.
func inSchema(t *testing.T, dbURL, name string) string {
	t.Helper()
	exec(t, dbURL, "CREATE SCHEMA "+name)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	migrate(t, u.String())
	return u.String()
}

// TestOpenNeedsTheStoresMigrations: the bus's tables come with the
// store's migrations (00041), not from Open: on a database the store has
// not migrated Open fails with ErrNoSchema and creates nothing; once the
// store has migrated it, Open works.
func TestOpenNeedsTheStoresMigrations(t *testing.T) {
	db := emptyDatabase(t)
	_, err := cluster.Open(context.Background(), cluster.Config{URL: db, NodeID: "a", Clock: clocktest.NewRunning()})
	if !errors.Is(err, cluster.ErrNoSchema) {
		t.Fatalf("Open of a database the store has not migrated: %v, want ErrNoSchema", err)
	}
	var tables int
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
		WHERE table_name LIKE 'cbdash_cluster_%'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("%d tables of the bus after the failed Open (%v), want none", tables, err)
	}
	migrate(t, db)
	open(t, db, "a")
}

// TestDeploymentsInTwoSchemasOfOneDatabaseAreApart: channels and advisory
// locks belong to the database, so two deployments in two schemas of it
// must keep their own: a node hears only its schema's nodes, and each
// schema has a leader of its own.
func TestDeploymentsInTwoSchemasOfOneDatabaseAreApart(t *testing.T) {
	db := database(t)
	one, two := inSchema(t, db, "one"), inSchema(t, db, "two")
	a1, b1, a2 := open(t, one, "a"), open(t, one, "b"), open(t, two, "a")
	msgs, cancel := b1.Subscribe("events")
	defer cancel()
	ctx := context.Background()
	for _, p := range []struct {
		bus *cluster.Postgres
		msg string
	}{{a1, "x"}, {a2, "from the other schema"}, {a1, "z"}} {
		if err := p.bus.Publish(ctx, "events", []byte(p.msg)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"x", "z"} {
		select {
		case m := <-msgs:
			if string(m.Payload) != want {
				t.Fatalf("b in schema one received %q, want %q", m.Payload, want)
			}
		case <-time.After(10 * time.Second): // real time: the database's delivery
			t.Fatalf("b in schema one did not receive %q", want)
		}
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	led := make(chan string, 2)
	for _, bus := range []*cluster.Postgres{a1, a2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = bus.Lead(lctx, "incidents", func(context.Context) { led <- "led" })
		}()
	}
	for range 2 {
		select {
		case <-led:
		case <-time.After(10 * time.Second): // real time, as above
			t.Fatal("the nodes of two schemas did not both lead incidents")
		}
	}
	stop()
	wg.Wait()
}

// TestANodeKnowsWhetherItHasPeers: alone, a node counts no peer; another
// node that starts is counted as soon as it has said so on the bus, and
// no longer once it has stopped.
func TestANodeKnowsWhetherItHasPeers(t *testing.T) {
	db := database(t)
	a := open(t, db, "a")
	eventually.True(t, "a alone: no peer", func() bool { return a.Peers() == 0 })
	b := open(t, db, "b")
	eventually.True(t, "b counted by a", func() bool { return a.Peers() >= 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "b no longer counted once stopped", func() bool { return a.Peers() == 0 })
}

// Claims lists every node's live claims: what a collector that starts
// reads of the instances connected elsewhere; a node that closes takes
// its claims with it.
func TestClaimsListTheLiveClaimsOfEveryNode(t *testing.T) {
	db := database(t)
	a, b := open(t, db, "a"), open(t, db, "b")
	ctx := context.Background()
	for _, c := range []struct {
		bus  cluster.Bus
		inst string
	}{{a, "i1"}, {b, "i2"}, {b, "i3"}} {
		if err := c.bus.Claim(ctx, "api", c.inst); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(x, y cluster.Claim) int { return strings.Compare(x.Instance, y.Instance) })
	want := []cluster.Claim{{"api", "i1", "a"}, {"api", "i2", "b"}, {"api", "i3", "b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("claims %v, want %v", got, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "b's claims gone with its connection", func() bool {
		got, err := a.Claims(ctx)
		return err == nil && slices.Equal(got, want[:1])
	})
}
