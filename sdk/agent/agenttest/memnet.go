// Package agenttest has what tests of agents and collectors need beyond
// the standard library: MemNet, an in-memory network on which a
// collector and its agents can run inside a testing/synctest bubble.
package agenttest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// MemNet is an in-memory network for tests that run in a testing/synctest
// bubble, where time is virtual: a goroutine reading a loopback socket is
// not durably blocked, so a bubble cannot hold the test collector on
// loopback, but it holds memConns (a goroutine waiting on one waits on a
// sync.Cond of the bubble). Collectors listen on addresses of it
// (Listen) and agents dial them with Client() or Dial; a dial to an
// address nobody listens on is refused (ECONNREFUSED, as on loopback), so
// stopping and restarting a collector on its address behaves as it does
// on loopback. Its connections buffer what is written without bound, as
// a socket's buffers absorb what a test sends: tests of flow control and
// memory bounds stay on loopback.
type MemNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	n         int
}

// NewMemNet returns a network with no listener.
func NewMemNet() *MemNet { return &MemNet{listeners: map[string]*memListener{}} }

// Listen listens on addr, or on a new address when addr is "".
func (n *MemNet) Listen(addr string) net.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.n++
		addr = fmt.Sprintf("collector-%d.test:80", n.n)
	}
	if _, ok := n.listeners[addr]; ok {
		panic("MemNet: " + addr + " is in use")
	}
	l := &memListener{n: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l
}

// Dial connects to the listener on addr through a net.Pipe.
func (n *MemNet) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if l == nil {
		return nil, refused
	}
	client, server := memPipe(memAddr("agent.test:1"), memAddr(addr))
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
		refused.Err = ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, refused
}

// Client returns an HTTP client whose connections are the network's.
func (n *MemNet) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: n.Dial}}
}

// memListener is a net.Listener on a MemNet address.
type memListener struct {
	n     *MemNet
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening: the address is free again.
func (l *memListener) Close() error {
	l.once.Do(func() {
		l.n.mu.Lock()
		delete(l.n.listeners, l.addr)
		l.n.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (memAddr) Network() string  { return "mem" }
func (a memAddr) String() string { return string(a) }

// memPipe returns the two ends of an in-memory connection.
func memPipe(a, b net.Addr) (*memConn, *memConn) {
	ab, ba := newHalf(), newHalf()
	return &memConn{in: ba, out: ab, local: a, remote: b}, &memConn{in: ab, out: ba, local: b, remote: a}
}

// memConn is one end of an in-memory connection: what it writes goes
// into its peer's buffer at once, a read waits for data, the peer's close
// (io.EOF), its own close (net.ErrClosed) or its read deadline
// (os.ErrDeadlineExceeded). Writes never wait, so write deadlines are
// accepted and ignored.
type memConn struct {
	in, out       *half
	local, remote net.Addr
}

// half is one direction of a memConn.
type half struct {
	mu       sync.Mutex
	cond     sync.Cond
	buf      []byte
	eof      bool // the writer closed
	closed   bool // the reader closed
	deadline time.Time
	timer    *time.Timer
}

func newHalf() *half {
	h := &half{}
	h.cond.L = &h.mu
	return h
}

func (c *memConn) Read(b []byte) (int, error) {
	h := c.in
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		switch {
		case h.closed:
			return 0, net.ErrClosed
		case !h.deadline.IsZero() && !time.Now().Before(h.deadline):
			return 0, os.ErrDeadlineExceeded
		case len(h.buf) > 0:
			n := copy(b, h.buf)
			h.buf = h.buf[n:]
			return n, nil
		case h.eof:
			return 0, io.EOF
		}
		h.cond.Wait()
	}
}

func (c *memConn) Write(b []byte) (int, error) {
	h := c.out
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.eof {
		return 0, net.ErrClosed
	}
	if h.closed {
		return 0, syscall.EPIPE
	}
	h.buf = append(h.buf, b...)
	h.cond.Broadcast()
	return len(b), nil
}

// Close ends both directions: the peer reads io.EOF once it has read
// what was written, and its writes fail.
func (c *memConn) Close() error {
	for _, h := range []*half{c.in, c.out} {
		h.mu.Lock()
		if h == c.in {
			h.closed = true
		} else {
			h.eof = true
		}
		h.cond.Broadcast()
		h.mu.Unlock()
	}
	return nil
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// SetReadDeadline makes a waiting or later Read fail at t (at once for a
// t in the past; never for the zero time).
func (c *memConn) SetReadDeadline(t time.Time) error {
	h := c.in
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deadline = t
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if d := time.Until(t); !t.IsZero() && d > 0 {
		h.timer = time.AfterFunc(d, func() {
			h.mu.Lock()
			h.cond.Broadcast()
			h.mu.Unlock()
		})
	}
	h.cond.Broadcast()
	return nil
}
