package collector

import (
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
)

// relay is a TCP relay between the collector's store and PostgreSQL that
// a test cuts (the server unreachable: every connection reset, new ones
// refused) and restores on the same port.
type relay struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newRelay(t *testing.T, target string) *relay {
	r := &relay{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() { r.cut(); r.wg.Wait() })
	return r
}

func (r *relay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", r.target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			r.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			r.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
}

func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

func (r *relay) restore() {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(ln)
}

// TestReadyzFollowsPostgreSQL: a collector on PostgreSQL is ready while
// the database can commit, answers 503 naming the store while it cannot
// be reached (a load balancer stops sending it agents; they keep their
// buffers), and is ready again once it is back.
func TestReadyzFollowsPostgreSQL(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s (the SQLite case is TestFullDiskIsNotReadyAndTheAgentIsToldToRetry)", pgtest.EnvDSN)
	}
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, u.Host)
	u.Host = r.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	h := startHarness(t, u.String(), nil)
	if status, body := readyz(t, h); status != 200 {
		t.Fatalf("readyz %d %s", status, body)
	}
	r.cut()
	eventually.True(t, "readyz 503 naming the store while PostgreSQL is unreachable", func() bool {
		status, body := readyz(t, h)
		return status == 503 && strings.Contains(body, "store")
	})
	r.restore()
	eventually.True(t, "readyz 200 once PostgreSQL is back", func() bool {
		status, _ := readyz(t, h)
		return status == 200
	})
}
