package store

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
)

// commitEater relays TCP to PostgreSQL; when armed, it forwards the next
// COMMIT to the server and then closes the client's side, so the server
// commits and the store never hears so (the acknowledgement lost on the
// way back, as when the network fails at that instant).
type commitEater struct {
	ln    net.Listener
	armed atomic.Bool
	ate   atomic.Int32
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCommitEater(t *testing.T, target string) *commitEater {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &commitEater{ln: ln}
	e.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			e.mu.Lock()
			e.conns = append(e.conns, in, out)
			e.mu.Unlock()
			e.wg.Go(func() { io.Copy(in, out); in.Close() })
			e.wg.Go(func() {
				buf := make([]byte, 64<<10)
				// The end of the previous read: a COMMIT may be cut
				// across two reads (a read returns what has arrived,
				// which on a busy machine is often part of a write).
				const commit = "commit\x00"
				var tail []byte
				for {
					n, err := in.Read(buf)
					if n > 0 {
						chunk := buf[:n]
						seen := bytes.ToLower(append(tail, chunk...))
						tail = append(tail[:0], seen[max(len(seen)-len(commit)+1, 0):]...)
						eat := bytes.Contains(seen, []byte(commit)) && e.armed.CompareAndSwap(true, false)
						if eat {
							// Counted, and the client dropped, before the
							// COMMIT goes on: its answer cannot reach the
							// client, however this goroutine is scheduled
							// (forwarding first let a busy machine's
							// answer through before the close). The
							// server's side stays open (closed at
							// cleanup), so it reads and carries out the
							// COMMIT.
							e.ate.Add(1)
							in.Close()
						}
						if _, werr := out.Write(chunk); werr != nil {
							out.Close()
							return
						}
						if eat {
							return
						}
					}
					if err != nil {
						out.Close()
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// A COMMIT that the server carries out but whose answer is lost: the
// batch is not acknowledged (SaveBatch fails), its resend is recognised
// as a duplicate, and every count of it is stored once: the second's row,
// and the per-instance minutes (those the writer had buffered and wrote
// in that transaction, and the batch's own).
func TestACommitWhoseAnswerIsLost(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t, "lost.db")
	if !pgOK(dsn) {
		t.Skip("PostgreSQL only: a COMMIT's answer lost on the network")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	relay := newCommitEater(t, u.Host)
	u.Host = relay.ln.Addr().String()
	clk := clocktest.Virtual()
	s := rvOpen(t, u.String(), Options{ReadConns: 1, Clock: clk})
	ctx := context.Background()
	t0 := clocktest.Epoch().Truncate(time.Minute)
	rvMustSave(t, s, "pay-1", rvBatch(1, t0, 10), t0, true)
	// The writer's instance minutes are due (its clock past the minute's
	// end and the grace for late reports): the next group writes those it
	// buffered (seq 1's).
	clk.Advance(time.Minute + imGrace + time.Second)
	relay.armed.Store(true)
	stored, err := s.SaveBatch(ctx, "pay", "pay-1", 1, rvBatch(2, t0, 20), t0)
	if relay.ate.Load() != 1 {
		t.Fatalf("the relay ate %d COMMITs, want 1 (stored %v, err %v)", relay.ate.Load(), stored, err)
	}
	// The writer asks the server, which says it committed: the batch is
	// acknowledged.
	if err != nil || !stored {
		t.Fatalf("SaveBatch whose COMMIT's answer was lost = %v, %v; want stored (the server committed it)", stored, err)
	}
	if last, err := s.LastSeq(ctx, "pay", "pay-1", 1); err != nil || last != 2 {
		t.Fatalf("LastSeq = %d, %v; want 2", last, err)
	}
	// An agent that resends it anyway (its ack lost too) is told it is a
	// duplicate.
	rvMustSave(t, s, "pay-1", rvBatch(2, t0, 20), t0, false)
	rvMustSave(t, s, "pay-1", rvBatch(3, t0, 300), t0, true)
	if got := rvCalls(t, s, "windows_second", t0); got != 330 {
		t.Errorf("the second holds %d calls, want 330 (10+20+300)", got)
	}
	if calls := rvInstanceCalls(t, s, t0); calls != 330 {
		t.Errorf("the instance minutes count %d calls, want 330 (10+20+300: each batch once)", calls)
	}
}

func rvInstanceCalls(t *testing.T, s *Store, t0 time.Time) int64 {
	t.Helper()
	mins, err := s.InstanceHistory(context.Background(), cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db", From: t0, To: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	for _, m := range mins {
		calls += m.Calls
	}
	return calls
}

func pgOK(dsn string) bool {
	u, err := url.Parse(dsn)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql")
}
