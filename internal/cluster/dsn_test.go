package cluster_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/cluster"
)

// The collectors that share a PostgreSQL store given as a keyword/value
// DSN (host=... password=... dbname=...) join one bus, as with its URL
// form: ForStore does not take it for an SQLite file (a bus of one node),
// and an unreachable one's error does not show its password.
func TestForStoreJoinsThePostgreSQLOfAKeywordValueDSN(t *testing.T) {
	db := database(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	kv := "host=" + u.Hostname() + " port=" + u.Port() + " user=" + u.User.Username() + " password='" + pw + "' dbname=" + strings.Trim(u.Path, "/") +
		" sslmode=" + u.Query().Get("sslmode")
	bus, err := cluster.ForStore(context.Background(), kv, cluster.Config{NodeID: "kv", Clock: clocktest.NewRunning(), Reconnect: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	pg, ok := bus.(*cluster.Postgres)
	if !ok {
		t.Fatalf("ForStore(a keyword/value DSN) = %T, want *cluster.Postgres", bus)
	}
	other := open(t, db, "url")
	msgs, cancel := other.Subscribe("events")
	defer cancel()
	if err := pg.Publish(context.Background(), "events", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.From != "kv" || string(m.Payload) != "hello" {
			t.Errorf("the URL node got %+v, want the keyword/value node's hello", m)
		}
	case <-time.After(10 * time.Second): // bounds the failure only
		t.Fatal("the node opened by the URL got nothing from the one opened by the keyword/value DSN")
	}

	bad := "host=" + u.Hostname() + " port = notaport user=x password = 'sec\\' ret'"
	_, err = cluster.ForStore(context.Background(), bad, cluster.Config{NodeID: "bad"})
	if err == nil || strings.Contains(err.Error(), "sec") || strings.Contains(err.Error(), "ret'") {
		t.Errorf("ForStore(a bad keyword/value DSN): %v, want an error without its password", err)
	}
}
