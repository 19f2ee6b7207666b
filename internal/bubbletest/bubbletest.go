// Package bubbletest helps server tests whose waits are logical time run
// in a testing/synctest bubble (synctest.Test): an HTTP server on an
// in-memory network that a bubble can hold, and Settle.
//
// In a bubble the time package's clock is virtual: time.Sleep returns
// when every other goroutine of the bubble is durably blocked (waiting on
// a channel, a timer or a sync.Cond of the bubble) and the clock has been
// moved to the sleeper's deadline, at once in real time; synctest.Wait
// returns when every other goroutine of the bubble is durably blocked.
// So a test that would step a virtual clock and poll until a goroutine has
// reacted (internal/eventually) instead sleeps, or waits, and asserts.
// The code under test runs on real time there: clocktest.NewRunning()
// made in the bubble is a clock.Clock that starts at the test epoch and
// moves with the bubble's clock.
//
// What a bubble holds (from the synctest documentation, and tried here):
// goroutines, channels, timers and tickers made in the bubble; HTTP over
// NewServer's in-memory connections; a store, on SQLite or on PostgreSQL
// (a goroutine in a file's syscall or waiting for the database's answer
// is not durably blocked, but its wait ends by itself, so Wait waits for
// it and the clock stands still meanwhile). What it cannot hold: a
// goroutine that waits on a socket for someone else to speak (a server
// on loopback, an agent's websocket, the cluster's LISTEN): neither Wait
// nor the clock would move while it waits.
package bubbletest

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Advance moves a bubble's virtual clock on by d: every timer of the
// bubble due meanwhile fires, and no real time passes (time.Sleep in a
// synctest bubble). Only in a bubble: outside one it would really sleep.
func Advance(d time.Duration) { time.Sleep(d) }

// Settling is how far Settle moves the clock: more than the store's
// writer waits for more operations before it commits a group (150 ms at
// most: internal/store's groupWait).
const Settling = 200 * time.Millisecond

// Settle, in a bubble, lets the clock run on by Settling and then waits
// until every other goroutine of the bubble is durably blocked: what they
// were doing is done, short waits included (a store's write waiting for
// company, then committed). A step that must not move the clock calls
// synctest.Wait instead.
func Settle() {
	Advance(Settling)
	synctest.Wait()
}

// Server is a real http.Server answering on an in-memory network:
// Client's connections are net.Pipe pairs whose other end the server
// accepts, whatever the host of the request's URL. A pipe has no buffer
// (a write waits for the other end to read it), which request and answer
// do not notice; a handler that stops reading a request's body holds its
// client. It must be made and used in a bubble; it is closed when the
// test ends.
type Server struct {
	// URL is a base URL for requests: http://bubble.test. Any host
	// reaches the server through Client.
	URL string
	// Client sends every request to the server. Its transport keeps idle
	// connections like http.DefaultTransport does.
	Client *http.Client

	l   *listener
	srv *http.Server
}

// NewServer starts a Server serving h, closed (and its connections and
// goroutines ended) by tb's cleanup.
func NewServer(tb testing.TB, h http.Handler) *Server {
	tb.Helper()
	l := &listener{conns: make(chan net.Conn), done: make(chan struct{})}
	s := &Server{URL: "http://bubble.test", l: l, srv: &http.Server{Handler: h}}
	tr := &http.Transport{DialContext: l.dial, ForceAttemptHTTP2: false}
	s.Client = &http.Client{Transport: tr}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.srv.Serve(l)
	}()
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = s.srv.Close()
		<-served
	})
	return s
}

// listener hands the server the server ends of the pipes dial makes.
type listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *listener) Addr() net.Addr { return pipeAddr{} }

// dial makes a pipe and hands its server end to Accept.
func (l *listener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "bubble.test:80" }
