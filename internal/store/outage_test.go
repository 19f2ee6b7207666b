package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// cutter is a TCP relay between the store and PostgreSQL that a test can
// cut (the server unreachable: every connection reset, new ones refused)
// and restore on the same port: the outage at the process boundary.
type cutter struct {
	t      *testing.T
	addr   string // where the store connects
	target string // the PostgreSQL server
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	c := &cutter{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(func() { c.cut(); c.wg.Wait() })
	return c
}

func (c *cutter) serve(ln net.Listener) {
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	c.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			c.wg.Go(func() { io.Copy(out, in); out.Close() })
			c.wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
}

// cut closes the listener and every relayed connection.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// restore listens again on the same address.
func (c *cutter) restore() {
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.serve(ln)
}

// TestWritableSeesPostgreSQLGoAndComeBack: while PostgreSQL cannot be
// reached, batches fail with a transient error (so the collector does not
// ack them and agents keep their buffers) and Writable says why; once it
// is back, the next batch commits, Writable is nil again, and the batch
// that failed is stored exactly once when the agent resends it.
func TestWritableSeesPostgreSQLGoAndComeBack(t *testing.T) {
	t.Parallel()
	dsn := storetest.Path(t)
	if !store.IsPostgres(dsn) {
		t.Skip("PostgreSQL only: the server going away (TestWritableSeesAFullDisk is SQLite's)")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	relay := newCutter(t, u.Host)
	u.Host = relay.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	s := storetest.OpenFile(t, u.String(), store.Options{ReadConns: 1})
	ctx := context.Background()
	if err := s.SaveHello(ctx, hello("api", "i1", 1, "db"), t0); err != nil {
		t.Fatal(err)
	}
	batch := func(seq uint64) protocol.Batch {
		return protocol.Batch{Seq: seq, Windows: []protocol.Window{window("db", t0.Add(time.Duration(seq)*time.Second), protocol.StateClosed, 5, 1)}}
	}
	mustSave(t, s, "api", "i1", 1, batch(1))

	relay.cut()
	_, err = s.SaveBatch(ctx, "api", "i1", 1, batch(2), t0)
	if err == nil || !store.Transient(err) {
		t.Fatalf("SaveBatch with PostgreSQL gone = %v, want a transient error", err)
	}
	if err := s.Writable(ctx); err == nil {
		t.Fatal("Writable with PostgreSQL gone = nil")
	}

	relay.restore()
	if !mustSave(t, s, "api", "i1", 1, batch(2)) {
		t.Fatal("the resent batch 2 was taken for a duplicate: it had not been stored")
	}
	if mustSave(t, s, "api", "i1", 1, batch(2)) {
		t.Fatal("batch 2 stored twice")
	}
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable after PostgreSQL came back: %v", err)
	}
	if seq, err := s.LastSeq(ctx, "api", "i1", 1); err != nil || seq != 2 {
		t.Fatalf("LastSeq = %d, %v; want 2", seq, err)
	}
}

// TestOpenOfAnUnreachablePostgreSQLNamesItWithoutThePassword runs on both
// backends' suites: it needs no server.
func TestOpenOfAnUnreachablePostgreSQLNamesItWithoutThePassword(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for name, dsn := range map[string]string{
		"unreachable": "postgres://ann:s3cret@" + addr + "/cbdash?sslmode=disable&connect_timeout=2",
		"bad DSN":     "postgres://ann:s3cret@" + addr + "/cbdash?sslmode=sometimes",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := store.Open(context.Background(), dsn, store.Options{})
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows the password: %v", err)
			}
			if !strings.Contains(err.Error(), "postgres://ann:xxxxx@"+addr) && !strings.Contains(err.Error(), "does not parse") {
				t.Errorf("the error does not name the masked DSN: %v", err)
			}
			if errors.Is(err, store.ErrNewerSchema) {
				t.Errorf("wrong error: %v", err)
			}
		})
	}
}
