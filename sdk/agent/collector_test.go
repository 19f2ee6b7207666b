package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/sdk/agent/agenttest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// collector is a test collector: it speaks cbdash.v1 over a real loopback
// websocket, stores batches exactly once per (instance, started_at, seq)
// in memory that survives stop and restart (as the real one's SQLite
// would), and can be stopped and restarted on the same address.
type collector struct {
	tb    testing.TB
	token string
	addr  string
	tls   bool
	mem   *agenttest.MemNet // the network it listens on; nil: loopback

	mu       sync.Mutex
	srv      *httptest.Server
	conns    map[*websocket.Conn]context.CancelFunc
	live     *websocket.Conn // the latest welcomed connection
	lastSeq  map[string]uint64
	hellos   []protocol.Hello
	stored   []protocol.Batch
	errs     []string // why the collector refused something
	handlers sync.WaitGroup

	// Behaviours, set before the agent connects.
	mode collectorMode
	// afterStore runs after a batch is stored and before it is
	// acknowledged; returning false cuts the connection instead.
	afterStore func(protocol.Batch) bool
	// beforeStore runs before a batch is stored; returning false cuts the
	// connection without storing it (a store that cannot commit).
	beforeStore func(protocol.Batch) bool
	// refuse returns a reason to refuse a batch (Error{Seq}), or "".
	refuse func(protocol.Batch) string
	// gate, when not nil, holds every session's reading until it is
	// closed: a frozen collector (SIGSTOP) whose sockets stay open.
	gate chan struct{}
	// refuseHello, when not nil, answers every hello with this error
	// and closes the connection (1008 when it is permanent, as the real
	// collector does; 1011 otherwise).
	refuseHello *protocol.Error
	helloAt     []time.Time // when each hello was received
	// storeError, when not nil, answers every batch with this error
	// instead of storing it, and closes the connection (1011), as the
	// real collector does when its store cannot commit.
	storeError *protocol.Error
	// readyz answers GET /readyz with this status; nil answers 404 (not
	// ready). readyzHits counts the requests.
	readyz     func() int
	readyzHits int
	// closes are the close statuses the agent's connections ended with
	// (-1: no close frame).
	closes []websocket.StatusCode
}

type collectorMode int

const (
	normal            collectorMode = iota
	silent                          // accept the socket and never read
	welcomeThenSilent               // answer the hello, then never read
)

func newCollector(tb testing.TB) *collector { return startCollector(tb, false) }

// startCollector starts a collector; with tls it serves wss:// with a
// self-signed certificate that only client() trusts.
func startCollector(tb testing.TB, tls bool) *collector {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &collector{tb: tb, token: "agent-secret", addr: ln.Addr().String(),
		conns: map[*websocket.Conn]context.CancelFunc{}, lastSeq: map[string]uint64{}, tls: tls}
	c.serve(ln)
	tb.Cleanup(c.stop)
	return c
}

// newMemCollector starts a collector on the in-memory network n, for a
// test in a synctest bubble (see agenttest.MemNet).
func newMemCollector(tb testing.TB, n *agenttest.MemNet) *collector {
	tb.Helper()
	ln := n.Listen("")
	c := &collector{tb: tb, token: "agent-secret", addr: ln.Addr().String(), mem: n,
		conns: map[*websocket.Conn]context.CancelFunc{}, lastSeq: map[string]uint64{}}
	c.serve(ln)
	tb.Cleanup(c.stop)
	return c
}

func (c *collector) url() string {
	if c.tls {
		return "wss://" + c.addr + "/api/v1/agent"
	}
	return "ws://" + c.addr + "/api/v1/agent"
}

// client returns an HTTP client that trusts the collector's certificate.
func (c *collector) client() *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv.Client()
}

func (c *collector) serve(ln net.Listener) {
	srv := httptest.NewUnstartedServer(c)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused TLS handshakes are expected
	if c.tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	c.mu.Lock()
	c.srv = srv
	c.mu.Unlock()
}

// stop kills the collector: every connection is cut without a closing
// handshake and the listener is closed.
func (c *collector) stop() {
	c.mu.Lock()
	srv := c.srv
	c.srv = nil
	for conn, cancel := range c.conns {
		cancel()
		conn.CloseNow()
	}
	c.live = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	c.handlers.Wait()
}

// restart serves again on the same address, with the same stored data.
func (c *collector) restart() {
	c.tb.Helper()
	if c.mem != nil {
		c.serve(c.mem.Listen(c.addr))
		return
	}
	var ln net.Listener
	var err error
	waitFor(c.tb, time.Second, "the collector's address to be free again: "+c.addr, func() bool {
		ln, err = net.Listen("tcp", c.addr) // the old socket may linger for a moment
		return err == nil
	})
	c.serve(ln)
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" { // as the real collector's: no token
		c.mu.Lock()
		c.readyzHits++
		status := http.StatusNotFound
		if c.readyz != nil {
			status = c.readyz()
		}
		c.mu.Unlock()
		w.WriteHeader(status)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+c.token {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{protocol.Subprotocol}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	if c.srv == nil { // stopping
		c.mu.Unlock()
		cancel()
		conn.CloseNow()
		return
	}
	c.conns[conn] = cancel
	c.handlers.Add(1)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.conns, conn)
		if c.live == conn {
			c.live = nil
		}
		c.mu.Unlock()
		cancel()
		conn.CloseNow()
		c.handlers.Done()
	}()
	if c.mode == silent {
		<-ctx.Done()
		return
	}
	if err := c.session(ctx, conn); err != nil && ctx.Err() == nil {
		c.fail(err.Error())
	}
}

func (c *collector) session(ctx context.Context, conn *websocket.Conn) error {
	conn.SetReadLimit(protocol.MaxMessageBytes)
	_, data, err := conn.Read(ctx)
	if err != nil {
		return nil
	}
	var hello protocol.Hello
	if err := json.Unmarshal(data, &hello); err != nil || hello.Type != protocol.TypeHello {
		return errors.New("first message is not a hello")
	}
	if err := hello.Validate(); err != nil {
		return err
	}
	key := hello.Instance + "/" + time.UnixMilli(hello.StartedAt).String()
	c.mu.Lock()
	c.hellos = append(c.hellos, hello)
	c.helloAt = append(c.helloAt, time.Now())
	last := c.lastSeq[key]
	refusal := c.refuseHello
	c.mu.Unlock()
	if refusal != nil {
		code := websocket.StatusPolicyViolation
		if refusal.Retry {
			code = websocket.StatusInternalError
		}
		if writeJSON(ctx, conn, refusal) == nil {
			conn.Close(code, "refused")
		}
		return nil
	}
	if err := writeJSON(ctx, conn, protocol.Welcome{Type: protocol.TypeWelcome, Protocol: protocol.Version,
		LastSeq: last, ServerTime: time.Now().UnixMilli()}); err != nil {
		return nil
	}
	c.mu.Lock()
	c.live = conn
	c.mu.Unlock()
	if c.mode == welcomeThenSilent {
		<-ctx.Done()
		return nil
	}
	for {
		c.mu.Lock()
		gate := c.gate
		c.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil
			}
		}
		_, data, err := conn.Read(ctx)
		if err != nil {
			c.mu.Lock()
			c.closes = append(c.closes, websocket.CloseStatus(err))
			c.mu.Unlock()
			return nil
		}
		var env protocol.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return errors.New("malformed message")
		}
		if env.Type == protocol.TypeHello { // declares more breakers; not answered
			var h protocol.Hello
			if err := json.Unmarshal(data, &h); err != nil || h.Validate() != nil ||
				h.Instance != hello.Instance || h.StartedAt != hello.StartedAt {
				return errors.New("bad hello on an open connection")
			}
			hello = h
			c.mu.Lock()
			c.hellos = append(c.hellos, h)
			c.mu.Unlock()
			continue
		}
		var b protocol.Batch
		if err := json.Unmarshal(data, &b); err != nil || b.Type != protocol.TypeBatch {
			return errors.New("malformed batch")
		}
		if err := b.Validate(&hello, 0); err != nil {
			return err
		}
		if reason := c.refusal(b); reason != "" {
			if writeJSON(ctx, conn, protocol.Error{Type: protocol.TypeError, Seq: b.Seq, Reason: reason}) != nil {
				return nil
			}
			continue
		}
		c.mu.Lock()
		before, storeErr := c.beforeStore, c.storeError
		c.mu.Unlock()
		if storeErr != nil {
			if writeJSON(ctx, conn, storeErr) == nil {
				conn.Close(websocket.StatusInternalError, "store failing")
			}
			return nil
		}
		if before != nil && !before(b) {
			return nil
		}
		c.mu.Lock()
		if b.Seq > c.lastSeq[key] {
			c.stored = append(c.stored, b)
			c.lastSeq[key] = b.Seq
		}
		after := c.afterStore
		c.mu.Unlock()
		if after != nil && !after(b) {
			return nil
		}
		if writeJSON(ctx, conn, protocol.Ack{Type: protocol.TypeAck, Seq: b.Seq}) != nil {
			return nil
		}
	}
}

// freeze stops every session from reading (until thaw); the sockets stay
// open, as with a collector stopped by SIGSTOP.
func (c *collector) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = make(chan struct{})
}

// thaw lets the sessions read again.
func (c *collector) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

func (c *collector) refusal(b protocol.Batch) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse == nil {
		return ""
	}
	return c.refuse(b)
}

func (c *collector) fail(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, reason)
}

func writeJSON(ctx context.Context, conn *websocket.Conn, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeRaw(ctx, conn, websocket.MessageText, data)
}

func writeRaw(ctx context.Context, conn *websocket.Conn, typ websocket.MessageType, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return conn.Write(ctx, typ, data)
}

// send writes a raw frame to the live connection.
func (c *collector) send(typ websocket.MessageType, data []byte) error {
	c.mu.Lock()
	conn := c.live
	c.mu.Unlock()
	if conn == nil {
		return errors.New("no live connection")
	}
	return writeRaw(context.Background(), conn, typ, data)
}

func (c *collector) sendJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.send(websocket.MessageText, data)
}

func (c *collector) connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live != nil
}

// batches returns a copy of the stored batches, in storing order.
func (c *collector) batches() []protocol.Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]protocol.Batch(nil), c.stored...)
}

// set changes the collector's behaviours under its lock.
func (c *collector) set(f func(c *collector)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *collector) hellosAt() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.helloAt...)
}

func (c *collector) readyzCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyzHits
}

func (c *collector) closeStatuses() []websocket.StatusCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]websocket.StatusCode(nil), c.closes...)
}

func (c *collector) lastHello() protocol.Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hellos[len(c.hellos)-1]
}

func (c *collector) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

func (c *collector) transitions() []protocol.Transition {
	var ts []protocol.Transition
	for _, b := range c.batches() {
		ts = append(ts, b.Transitions...)
	}
	return ts
}

func (c *collector) results() []protocol.CommandResult {
	var rs []protocol.CommandResult
	for _, b := range c.batches() {
		rs = append(rs, b.CommandResults...)
	}
	return rs
}

// sum adds up every stored window of breaker name.
func (c *collector) sum(name string) (protocol.Counts, []int64) {
	var total protocol.Counts
	latency := make([]int64, protocol.NumLatencyBuckets)
	for _, b := range c.batches() {
		for _, w := range b.Windows {
			if w.Breaker != name {
				continue
			}
			total.Add(w.Counts)
			for i, n := range w.Latency {
				latency[i] += n
			}
		}
	}
	return total, latency
}

func (c *collector) windows(name string) []protocol.Window {
	var ws []protocol.Window
	for _, b := range c.batches() {
		for _, w := range b.Windows {
			if w.Breaker == name {
				ws = append(ws, w)
			}
		}
	}
	return ws
}
