package collector

import (
	"github.com/cbdash/cbdash/internal/ingest"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/sdk/protocol"
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

// relayedPostgres is a DSN of the test's PostgreSQL schema reached
// through a relay the test can cut (connect_timeout 2 s).
func relayedPostgres(t *testing.T) (string, *relay) {
	t.Helper()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, u.Host)
	u.Host = r.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	return u.String(), r
}

// TestReadyzFollowsPostgreSQL: a collector on PostgreSQL is ready while
// the database can commit, answers 503 naming the store while it cannot
// be reached (a load balancer stops sending it agents; they keep their
// buffers), and is ready again once it is back.
func TestReadyzFollowsPostgreSQL(t *testing.T) {
	t.Parallel()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("PostgreSQL only: set %s (the SQLite case is TestFullDiskIsNotReadyAndTheAgentIsToldToRetry)", pgtest.EnvDSN)
	}
	dsn, r := relayedPostgres(t)
	h := startHarness(t, dsn, nil)
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

// TestReadyWithinASecondOfPostgreSQLComingBack: a batch fails while
// PostgreSQL is unreachable (the agent is told to come back after
// retry_after_ms); /readyz answers 503 until the server is back, then
// 200 within four probes (a second of the collector's clock) with no agent sending
// (the collector probes its store every StoreProbeEvery while it
// fails; it used to wait for a batch to commit).
func TestReadyWithinASecondOfPostgreSQLComingBack(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		t.Skipf("PostgreSQL only: set %s", pgtest.EnvDSN)
	}
	dsn, r := relayedPostgres(t)
	clk := clocktest.Virtual()
	h := startHarness(t, dsn, func(c *Config) { c.Clock = clk })
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	r.cut()
	a.send(h.batch(1, 10, 0))
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !e.Retry || e.RetryAfterMillis != ingest.StoreRetryAfter.Milliseconds() {
		t.Fatalf("%+v, want a fatal retry-later after %v", e, ingest.StoreRetryAfter)
	}
	if status, body := readyz(t, h); status != 503 {
		t.Fatalf("readyz with PostgreSQL unreachable: %d %s", status, body)
	}
	r.restore()
	// The claim is in probes, which the collector makes every
	// StoreProbeEvery of its clock while the store fails: ready within
	// four of them (a second) once PostgreSQL is back, plus the one that
	// may have been under way at the restore. The clock is advanced
	// freely meanwhile; a probe's I/O takes real time, which a busy
	// machine stretches, so the clock's total says nothing.
	before := h.col.ing.ProbesDone()
	var last string
	defer func() { t.Logf("last readyz: %s", last) }()
	eventually.True(t, "readyz 200 once PostgreSQL is back", func() bool {
		status, body := readyz(t, h)
		if status == 200 {
			return true
		}
		last = body
		clk.Advance(50 * time.Millisecond)
		return false
	})
	probes := h.col.ing.ProbesDone() - before
	t.Logf("ready after %d probes once PostgreSQL came back", probes)
	if probes > 5 {
		t.Fatalf("readyz 200 only after %d probes once PostgreSQL came back, want at most 5 (4 probe periods, a second of the collector's clock, and one under way)", probes)
	}
}
