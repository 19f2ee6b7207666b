package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
	"golang.org/x/time/rate"
)

// OutQueue is how many messages may wait for the agent's socket; a session
// whose agent lets it fill is closed (the agent reconnects and resends).
const OutQueue = 256

// outbox queues the messages for the agent's socket, written by the
// session's writer goroutine: at most OutQueue wait. It is a list that
// grows with what waits, not a channel of OutQueue slots: those were 6 KB
// a connection, 6 MB of a thousand mostly idle ones.
type outbox struct {
	mu    sync.Mutex
	q     [][]byte
	ready chan struct{} // signalled when q was empty and a message came
	room  chan struct{} // signalled when messages were taken
	wake  func()        // called after ready is signalled (session.kick); nil = none
}

// outboxKeep is the largest list the writer keeps for reuse once written.
const outboxKeep = 16

func newOutbox() *outbox {
	return &outbox{ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// put queues data unless OutQueue messages wait already.
func (o *outbox) put(data []byte) bool { return o.putBelow(data, OutQueue) }

// putBelow queues data unless limit messages wait already.
func (o *outbox) putBelow(data []byte, limit int) bool {
	o.mu.Lock()
	if len(o.q) >= limit {
		o.mu.Unlock()
		return false
	}
	o.q = append(o.q, data)
	first := len(o.q) == 1
	if first {
		signal(o.ready)
	}
	o.mu.Unlock()
	if first && o.wake != nil {
		o.wake()
	}
	return true
}

// putWait queues data, waiting for room until ctx is done (then data is
// dropped). One goroutine at a time may wait. It leaves half the outbox
// to put: the messages sent without waiting meanwhile (a hold applied at
// the hello, an operator's command) find room behind a backlog that
// putWait filled, instead of taking it for an agent that does not read.
func (o *outbox) putWait(ctx context.Context, data []byte) {
	for !o.putBelow(data, OutQueue/2) {
		select {
		case <-o.room:
		case <-ctx.Done():
			return
		}
	}
}

// swap takes every waiting message, leaving spare (emptied) in its place.
func (o *outbox) swap(spare [][]byte) [][]byte {
	o.mu.Lock()
	batch := o.q
	o.q = spare[:0]
	o.mu.Unlock()
	if len(batch) > 0 {
		signal(o.room)
	}
	return batch
}

// SaveQueue is how many validated batches of one connection may be on
// their way to their commit (and refusals waiting to be sent behind
// them); when that many are, the connection stops reading (the agent's
// own backpressure). Small: a backlog waits in the socket and in the
// agent, not in the collector's memory (64 batches of 40 window reports
// for each of a thousand connections were gigabytes).
const SaveQueue = 8

// session is one agent websocket connection. Its reading goroutine reads,
// validates and hands each batch to the store (store.Stream.Save); a
// receiving goroutine, running while outcomes are expected, takes the
// batches' outcomes from the stream (receive); a writer goroutine owns
// the socket's writes: the queued messages
// (welcome, commands, the error of a going away) and, in the order the
// batches were read, their acknowledgements (after their commit) and
// refusals.
type session struct {
	c      *Pipeline
	conn   *websocket.Conn
	raw    net.Conn // conn's own connection (closeWithin cuts it)
	cancel context.CancelFunc
	// tooBig: a read ended on a message over the read limit, the
	// websocket has sent close 1009 and the rest of the message is still
	// coming (owned by the reading goroutine; see drainTooBig).
	tooBig bool

	// Set by the handshake, read-only afterwards.
	key       live.Key
	startedAt int64
	hello     *protocol.Hello
	service   string        // the token's service, "" = any
	tokenID   string        // store.AgentTokenID of the connection's token (see tokens.go)
	rehellos  *rate.Limiter // hellos on the open connection (Limits.RehelloBurst), on the collector's clock
	// lastQueued is the highest seq handed to the store (or stored before
	// the connection); owned by the reading goroutine.
	lastQueued uint64
	// lastStored is the highest seq stored (before the connection, or
	// committed on it); owned by the writer goroutine after the handshake.
	lastStored uint64

	saves saves

	done chan struct{} // closed when the session has ended
	// quiet is closed when the session reads and writes nothing more of
	// the store (its last commit has returned), which may be before its
	// closing handshake with the agent has ended.
	quiet     chan struct{}
	quietOnce sync.Once

	out    *outbox
	w      writer
	goAway chan struct{} // signalled by goingAway
	mu     sync.Mutex
	dead   bool
	// closing is the reason of a goingAway in progress, "" when none;
	// closeCode is its close status and closeRetry its error's retry.
	closing    string
	closeCode  websocket.StatusCode
	closeRetry bool // the error of the goingAway says retry
}

// saves are a session's batches, refusals and duplicates' acks in the
// order they were read, from when they are read until the writer
// goroutine has answered them: at most SaveQueue (slots). The session's
// receiving goroutine completes the batches with the outcomes the
// store's writer sends to the stream (receive); the session's writer
// answers from the front, in order, what is complete.
type saves struct {
	slots chan struct{}  // a token per entry in ring
	ready chan struct{}  // signalled when an entry was completed
	ops   sync.WaitGroup // batches handed to the store and not completed
	// stream takes the session's batches to the store and brings their
	// outcomes back (set by the handshake).
	stream *store.Stream

	mu sync.Mutex
	// expected: batches handed to stream whose outcome is not received
	// yet; receiving: a goroutine receives them (receive).
	expected  int
	receiving bool
	ring      [SaveQueue]*saveEntry
	first     int // index in ring of the oldest entry
	n         int // entries in ring
	// failed: a batch failed to be stored (not refused for good), and
	// the session ends; the batches after it must not be written (the
	// agent resends them all, and a later one stored would make the
	// failed one look stored: the store keeps the highest seq), so the
	// stream is stopped (see landed).
	failed bool
}

// saveEntry is a validated batch on its way to its commit, or, in order
// with them, a refusal or the ack of a duplicate.
type saveEntry struct {
	batch   *protocol.Batch
	at      time.Time // received
	start   time.Time // handed to the store (commit latency)
	seq     uint64
	reason  string // refused: the reason
	ackOnly bool   // a duplicate: acknowledged, not stored

	// Set once completed, under saves.mu.
	complete bool
	stored   bool     // stored, not a duplicate
	err      error    // not stored: why (store.ErrSkipped: not tried)
	rf       *refusal // err as answered to the agent
}

// ServeAgent serves GET /api/v1/agent, the agents' websocket (the token
// is checked in the hello; see session.run). Before Open it
// returns an error wrapping cbdash.ErrUnavailable, nothing written; once
// the websocket is accepted it returns nil at once, the session going on
// on a goroutine of its own until the agent, the collector's shutdown or
// a refusal ends it (Close waits for it).
func (c *Pipeline) ServeAgent(w http.ResponseWriter, r *http.Request) error {
	if !c.isReady() {
		return unavailable("collector is not ready")
	}
	sw := &agentSocket{ResponseWriter: w}
	conn, err := websocket.Accept(sw, r, &websocket.AcceptOptions{
		Subprotocols:       []string{protocol.Subprotocol},
		InsecureSkipVerify: true, // agents are not browsers: the token is the credential
	})
	if err != nil {
		return nil // Accept has written the response
	}
	// The session outlives the handler: it runs on a goroutine of its
	// own, and the handler returns at once, so that net/http and the
	// router let go of the request (headers, URL, the router's context)
	// and of the goroutine that served it, a few kilobytes a connection
	// otherwise held for as long as the agent stays connected. The
	// request's context ends when the handler returns: the session's
	// keeps its values and ends with the session (or the collector's
	// shutdown, which ends every session).
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	s := &session{c: c, conn: conn, raw: sw.conn, cancel: cancel, out: newOutbox(), done: make(chan struct{}), quiet: make(chan struct{}), goAway: make(chan struct{}, 1)}
	s.saves.slots, s.saves.ready = make(chan struct{}, SaveQueue), make(chan struct{}, 1)
	s.w.ctx, s.w.done, s.w.cancel = ctx, make(chan struct{}), func() {}
	s.out.wake = s.kick
	token := bearer(r)
	s.tokenID = store.AgentTokenID(token)
	if !c.addSession(s) {
		cancel()
		close(s.done)
		conn.Close(websocket.StatusGoingAway, "collector stopping")
		return nil
	}
	go func() {
		defer close(s.done)
		defer cancel()
		defer c.removeSession(s)
		s.run(ctx, token)
	}()
	return nil
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *session) run(ctx context.Context, token string) {
	defer s.conn.CloseNow()
	defer s.drainTooBig() // before the close, after the writer has stopped
	defer s.markQuiet()
	if s.conn.Subprotocol() != protocol.Subprotocol {
		s.conn.Close(websocket.StatusPolicyViolation, "subprotocol "+protocol.Subprotocol+" required")
		return
	}
	s.conn.SetReadLimit(protocol.MaxMessageBytes)
	defer s.stopWriter()
	defer s.cancel()

	if !s.handshake(ctx, token) {
		return
	}
	s.c.log.Debug("agent connected", "service", s.key.Service, "instance", s.key.Instance)

	s.readLoop(ctx)
	// The batches handed to the store are committed or skipped (after a
	// failure) before the session is quiet.
	s.saves.ops.Wait()
	// Nothing of this connection is read or written to the store from
	// here on: a newer connection of the instance may go on (see
	// handshake), while this one finishes its closing handshake.
	s.c.live.Disconnect(s.key, s)
	s.c.fleet.Disconnected(s.key)
	s.markQuiet()
	if s.skip() {
		// A batch failed to be stored, and reading stopped at the next
		// one: the writer answers the entries before it and then the
		// failure (a fatal retry-later), and ends the session itself.
		// Canceling it now (the deferred cancel) would cut those
		// answers short and leave the agent a connection closed without
		// a word.
		<-s.w.done
	}
}

// markQuiet closes s.quiet once.
func (s *session) markQuiet() { s.quietOnce.Do(func() { close(s.quiet) }) }

// handshake runs the pipeline's first steps for a connection (authorize,
// admitHello, register) and sends the welcome and the commands pending for
// the instance. On failure it has sent a fatal error and closed the
// connection.
func (s *session) handshake(ctx context.Context, token string) bool {
	c := s.c
	h, rf := s.admit(ctx, token)
	if h == nil {
		s.refuse(ctx, rf)
		return false
	}
	if ok, rf := s.awaitPrevious(ctx, h); !ok {
		s.refuse(ctx, rf)
		return false
	}
	now := c.now()
	if rf := c.admitLimits(s.tokenID, h, now); rf != nil {
		s.fatal(ctx, rf)
		return false
	}
	// Under mu: kill, from a shutdown that may come during the handshake,
	// reads the key to log it.
	s.mu.Lock()
	s.key, s.startedAt, s.hello = live.Key{Service: h.Service, Instance: h.Instance}, h.StartedAt, h
	s.mu.Unlock()
	// The welcome is queued as the instance is registered: a command issued
	// from then on is sent after it; commands issued before are read below.
	last, prev, rf := c.register(ctx, h, s, now, func(last uint64) {
		s.send(protocol.Welcome{Type: protocol.TypeWelcome, Protocol: protocol.Version, LastSeq: last, ServerTime: now.UnixMilli()})
	})
	if rf != nil {
		s.fatal(ctx, rf)
		return false
	}
	s.lastQueued, s.lastStored = last, last
	stream, err := c.store.NewStream(h.Service, h.Instance, h.StartedAt, SaveQueue)
	if err != nil {
		s.fatal(ctx, invalidInput("hello: ", err))
		return false
	}
	s.saves.stream = stream
	if prev != nil {
		// Another connection of the instance came and went meanwhile.
		prev.Replaced()
	}
	// Waiting for room, not send's kill at the bound: an instance may have
	// more commands waiting than the outbox holds. The writer runs
	// already (and ends the session on a write timeout, which ends the
	// wait).
	for _, cmd := range c.pending(ctx, s.key, now) {
		s.sendWait(ctx, cmd)
	}
	c.holds.Hello(ctx, s.key)
	return true
}

// refuse sends rf as a fatal error, if there is one to send.
func (s *session) refuse(ctx context.Context, rf *refusal) {
	if rf != nil {
		s.fatal(ctx, rf)
	}
}

// admit runs the handshake's first steps: the token (authorize), the
// token's connections, the hello read within HelloTimeout and admitHello.
// It returns the hello, or nil and the refusal to answer (nil when the
// read failed: there is no one to answer).
func (s *session) admit(ctx context.Context, token string) (*protocol.Hello, *refusal) {
	c := s.c
	svc, rf := c.authorize(ctx, token)
	if rf != nil {
		return nil, rf
	}
	if n, max := c.tokenConnections(s.tokenID), c.cfg.Limits.MaxConnectionsPerToken; n > max {
		c.metrics.distrusted(refusedConnections)
		return nil, retryLater(errOverLimit, "too many connections for this agent token (%d open, at most %d)", n, max)
	}
	s.service = svc
	s.rehellos = rate.NewLimiter(rate.Every(c.cfg.Limits.RehelloEvery), c.cfg.Limits.RehelloBurst)
	h, rf := s.readHello(ctx)
	if h == nil {
		return nil, rf
	}
	if rf := c.admitHello(h, s.service, overWebsocket); rf != nil {
		return nil, rf
	}
	return h, nil
}

// readHello reads the connection's first message, which must be a
// hello, within HelloTimeout: the hello, or nil and the refusal to
// answer (nil when the read failed).
func (s *session) readHello(ctx context.Context) (*protocol.Hello, *refusal) {
	hctx, cancel := context.WithTimeout(ctx, s.c.cfg.HelloTimeout)
	typ, data, err := s.conn.Read(hctx)
	cancel()
	if err != nil {
		s.tooBig = errors.Is(err, websocket.ErrMessageTooBig)
		return nil, nil
	}
	if typ != websocket.MessageText {
		return nil, refuse(cbdash.ErrInvalid, "%s", binaryReason)
	}
	m, _, err := decode(data)
	if err != nil {
		return nil, invalidInput("", err)
	}
	if m.Hello == nil {
		return nil, refuse(cbdash.ErrInvalid, "the first message must be a hello")
	}
	return m.Hello, nil
}

// awaitPrevious ends the previous connection of hello h's instance, if
// there is one here, and waits for it to be quiet: its last commit
// finished, before last_seq is read, so that the store's last seq is
// final and only this connection writes after it (which is what makes
// merging queued batches safe). It reports false when the session does
// not go on, with the refusal to answer (nil: none, ctx is done).
func (s *session) awaitPrevious(ctx context.Context, h *protocol.Hello) (bool, *refusal) {
	prev := s.c.live.ConnOf(live.Key{Service: h.Service, Instance: h.Instance})
	if prev == nil {
		return true, nil
	}
	prev.Replaced()
	// Real time: the wait is for a socket to close, not a logical delay.
	wait := time.NewTimer(s.c.cfg.HelloTimeout)
	defer wait.Stop()
	select {
	case <-prev.Quiet():
		return true, nil
	case <-wait.C:
		return false, retryLater(nil, "the previous connection of this instance is still closing")
	case <-ctx.Done():
		return false, nil
	}
}

// binaryReason refuses a binary frame.
const binaryReason = "binary frames are refused: send every message as one JSON text frame"

// readLoop reads messages until the connection ends, validating batches,
// applying them to live state and handing them to the store. A batch at
// or below the last one handed over on this connection (or stored before
// it) is a duplicate: it is acknowledged in turn, never stored again.
func (s *session) readLoop(ctx context.Context) {
	c := s.c
	// The reads take a context that is never done, and the connection
	// is closed once when ctx is (which ends a read in progress, as the
	// websocket does for a read's context): for a context that can be
	// done, the websocket registers and removes a context.AfterFunc on
	// every frame it reads, two allocations and two trips through the
	// session context's lock a message.
	reads := context.WithoutCancel(ctx)
	defer context.AfterFunc(ctx, func() { s.conn.CloseNow() })()
	for {
		typ, buf, err := readMessage(reads, s.conn)
		if err != nil {
			s.tooBig = errors.Is(err, websocket.ErrMessageTooBig)
			return
		}
		now := c.now()
		var m message
		var seq uint64
		var rf *refusal
		if typ != websocket.MessageText {
			c.metrics.batches.WithLabelValues("refused").Inc()
			rf = refuse(cbdash.ErrInvalid, "%s", binaryReason)
		} else if m, seq, err = decode(buf.Bytes()); err != nil {
			c.metrics.batches.WithLabelValues("refused").Inc()
			rf = invalidInput("", err)
		}
		putReadBuf(buf) // what decode returned is copied out of it
		if rf == nil && m.Hello != nil {
			if rf := s.rehello(ctx, m.Hello, now); rf != nil {
				s.fatal(ctx, rf)
				return
			}
			continue
		}
		if rf == nil {
			rf = c.admitBatch(s.hello, m.Batch, now)
		}
		e := &saveEntry{seq: seq, at: now}
		switch {
		case rf != nil:
			e.reason = rf.Reason
			c.log.Info("batch refused", "service", s.key.Service, "instance", s.key.Instance, "seq", seq, "reason", e.reason)
		case seq <= s.lastQueued:
			c.metrics.batches.WithLabelValues("duplicate").Inc()
			e.ackOnly = true
		default:
			b, skew := c.correctClock(s.key, m.Batch, now)
			b = c.vetCauses(ctx, s.key, b)
			e.batch = b
			if !c.toLive(ctx, s.key, b, now, skew, overWebsocket) {
				return
			}
		}
		if !s.hand(ctx, e) {
			return
		}
	}
}

// hand puts e in line behind the connection's earlier messages, waiting
// for room (SaveQueue), and hands its batch to the store. It reports
// false when the session ends first.
func (s *session) hand(ctx context.Context, e *saveEntry) bool {
	c := s.c
	select {
	case s.saves.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	q := &s.saves
	q.mu.Lock()
	failed := q.failed
	if !failed {
		q.ring[(q.first+q.n)%SaveQueue] = e
		q.n++
	}
	full := q.n == SaveQueue
	q.mu.Unlock()
	if failed { // the session is ending: nothing more is stored or answered
		<-q.slots
		return false
	}
	if e.batch == nil {
		s.completed(e, false, nil)
		return true
	}
	s.lastQueued = e.seq
	c.metrics.queue.Inc()
	e.start = time.Now()
	q.ops.Add(1)
	// Not canceled with the session once queued: the batch is then
	// committed (or skipped) before the session is quiet (see handshake).
	// Full: the ring is full, nothing more comes before a commit.
	if err := q.stream.Save(ctx, e.batch, e.at, full); err != nil {
		s.completed(e, false, err)
		c.metrics.queue.Dec()
		q.ops.Done()
		return true
	}
	s.expectOutcome()
	return true
}

// expectOutcome counts one more outcome to receive from the stream and
// starts the receiving goroutine when none runs. No goroutine waits for
// a session's outcomes while none is expected (a thousand mostly quiet
// connections hold no goroutine for it).
func (s *session) expectOutcome() {
	q := &s.saves
	q.mu.Lock()
	q.expected++
	start := !q.receiving
	q.receiving = true
	q.mu.Unlock()
	if start {
		go s.receive()
	}
}

// receive is the session's receiving goroutine: it takes the outcomes of
// the batches handed to the store, as the store's writer sends them
// (store.Stream.Next), until none is expected.
func (s *session) receive() {
	q := &s.saves
	for {
		s.landed(q.stream.Next())
		q.mu.Lock()
		q.expected--
		more := q.expected > 0
		q.receiving = more
		q.mu.Unlock()
		q.ops.Done() // last: the session waits for it (run) before it is quiet
		if !more {
			return
		}
	}
}

// landed completes the entry of a batch with its outcome and answers a
// failure to the stream: Stop when the session ends on it (the store
// then writes none of its later batches), Resume when the batch is
// refused for good (the ones after it go on).
func (s *session) landed(o store.BatchOutcome) {
	q := &s.saves
	e := q.entry(o.Batch)
	if e == nil { // not expected: end the session rather than ack past it
		s.c.log.Error("outcome of a batch the session did not hand to the store", "service", s.key.Service, "instance", s.key.Instance)
		s.kill("store error")
		if o.Err != nil && !errors.Is(o.Err, store.ErrSkipped) {
			q.stream.Stop()
		}
		s.c.metrics.queue.Dec()
		return
	}
	stop := s.completed(e, o.Stored, o.Err)
	if o.Err != nil && !errors.Is(o.Err, store.ErrSkipped) {
		if stop {
			q.stream.Stop()
		} else {
			q.stream.Resume()
		}
	}
	s.c.metrics.queue.Dec() // after: the gauge at 0 means every outcome is recorded
}

// entry returns the entry of batch b, which is in the ring until its
// outcome has been answered (nil when it is not).
func (q *saves) entry(b *protocol.Batch) *saveEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.n {
		if e := q.ring[(q.first+i)%SaveQueue]; e.batch == b && !e.complete {
			return e
		}
	}
	return nil
}

// skip reports whether a batch of this session failed to be stored and
// ended it (saves.failed).
func (s *session) skip() bool {
	s.saves.mu.Lock()
	defer s.saves.mu.Unlock()
	return s.saves.failed
}

// completed records e's outcome (on the session's receiving goroutine
// for a batch handed to the store) and wakes the session's writer. It
// reports whether the session ends on it: a failure that is not a
// refusal for good, after which none of the session's later batches is
// to be written.
func (s *session) completed(e *saveEntry, stored bool, err error) bool {
	var rf *refusal
	if err != nil && !errors.Is(err, store.ErrSkipped) {
		rf = s.c.saveFailed(s.key, s.startedAt, e.batch, err, errors.Is(err, context.Canceled))
	}
	q := &s.saves
	q.mu.Lock()
	e.complete, e.stored, e.err, e.rf = true, stored, err, rf
	ends := err != nil && (rf == nil || !rf.giveUp)
	if ends {
		q.failed = true
	}
	q.mu.Unlock()
	signal(q.ready)
	s.kick()
	return ends
}

// completeFront counts the complete entries at the front, in order: the
// ones next would take now.
func (q *saves) completeFront() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < q.n && q.ring[(q.first+n)%SaveQueue].complete {
		n++
	}
	return n
}

// next takes the oldest entry if it is complete.
func (q *saves) next() *saveEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 || !q.ring[q.first].complete {
		return nil
	}
	e := q.ring[q.first]
	q.ring[q.first] = nil
	q.first, q.n = (q.first+1)%SaveQueue, q.n-1
	<-q.slots
	return e
}

// readBufs are the buffers sessions read messages into, taken when a
// message has arrived and put back once it is decoded (what is decoded
// from it is copied: strings and slices of its own), so a session waiting
// for its next message, as a thousand mostly are, holds none.
var readBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptBuffer is the largest read buffer put back for reuse (a rare
// large message does not pin its size).
const maxKeptBuffer = 256 << 10

func putReadBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxKeptBuffer {
		readBufs.Put(buf)
	}
}

// readMessage waits for the next message and reads it into a buffer of
// readBufs (give it back with putReadBuf); as websocket.Conn.Read
// otherwise.
func readMessage(ctx context.Context, conn *websocket.Conn) (websocket.MessageType, *bytes.Buffer, error) {
	typ, r, err := conn.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	buf := readBufs.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		putReadBuf(buf)
		return 0, nil, err
	}
	return typ, buf, nil
}

// rehello accepts a new hello on an open connection when it names the same
// agent process (for example after it registered another breaker).
func (s *session) rehello(ctx context.Context, h *protocol.Hello, now time.Time) *refusal {
	if h.Service != s.key.Service || h.Instance != s.key.Instance || h.StartedAt != s.startedAt {
		return refuse(cbdash.ErrInvalid, "%v: a hello on an open connection must name the same service, instance and started_at", protocol.ErrInvalid)
	}
	if !s.rehellos.AllowN(now, 1) {
		s.c.metrics.distrusted(refusedRehellos)
		l := s.c.cfg.Limits
		return retryLater(errOverLimit, "too many hellos on one connection (at most %d at once, then one per %v)", l.RehelloBurst, l.RehelloEvery)
	}
	if rf := s.c.admitHello(h, s.service, overWebsocket); rf != nil {
		return rf
	}
	if rf := s.c.admitLimits(s.tokenID, h, now); rf != nil {
		return rf
	}
	if _, _, rf := s.c.register(ctx, h, s, now, nil); rf != nil {
		return rf
	}
	s.hello = h
	s.c.holds.Hello(ctx, s.key)
	return nil
}

// ackBytes is the acknowledgement of every batch up to seq: json.Marshal's
// bytes of protocol.Ack, without the reflection (one a batch).
func ackBytes(seq uint64) []byte {
	data := make([]byte, 0, 40)
	data = append(data, `{"type":"`+protocol.TypeAck+`","seq":`...)
	data = strconv.AppendUint(data, seq, 10)
	return append(data, '}')
}

// answer writes, in the order they were read, the answers to the
// complete entries at the front of s.saves: acknowledgements (acks are
// cumulative: several in a row are written as the last one), refusals,
// and for a batch that failed to be stored either its refusal for good
// (the ones after it go on) or a fatal retry-later that ends the session
// (the agent keeps the batch and the ones behind it, none acknowledged,
// and resends them on its next connection). It answers at most limit
// entries (see writeInOrder for why). It reports false when the session
// ends.
func (s *session) answer(ctx context.Context, write func([]byte) bool, held *heldAck, limit int) bool {
	c := s.c
	var ack uint64 // to acknowledge, 0 = nothing
	flush := func() bool {
		ack = max(ack, held.take())
		if ack == 0 {
			return true
		}
		data := ackBytes(ack)
		ack = 0
		return write(data)
	}
	refuse := func(seq uint64, reason string) bool {
		data, _ := json.Marshal(protocol.Error{Type: protocol.TypeError, Seq: seq, Reason: reason})
		return flush() && write(data)
	}
	for ; limit != 0; limit-- {
		e := s.saves.next()
		if e == nil {
			break
		}
		switch {
		case e.reason != "":
			if !refuse(e.seq, e.reason) {
				return false
			}
		case e.ackOnly:
			// Every batch before it is stored (or refused) by now: the
			// ack names the highest stored seq, as a welcome does.
			ack = max(s.lastStored, e.seq)
		case e.err == nil:
			// A duplicate (stored by another connection) is acknowledged too.
			c.saved(s.key, s.startedAt, e.batch, e.stored, e.start)
			s.lastStored = max(s.lastStored, e.seq)
			ack = s.lastStored
		case errors.Is(e.err, store.ErrSkipped):
			// One before it failed, and the session ends.
		case e.rf.giveUp:
			c.log.Warn("batch refused for good after failing to be stored", "service", s.key.Service, "instance", s.key.Instance, "seq", e.seq, "err", e.rf.Cause)
			if !refuse(e.seq, e.rf.Reason) {
				return false
			}
		default:
			if flush() {
				s.fatal(ctx, e.rf)
			}
			s.kill("store error")
			return false
		}
	}
	if d := c.cfg.AckDelay; d > 0 && ack > 0 {
		held.hold(ack, d, s.kick)
		return true
	}
	return flush()
}

// heldAck is an acknowledgement the session's writer holds for up to
// Config.AckDelay, to be written with the ones after it as one (acks
// are cumulative). Owned by the writer, but for fired.
type heldAck struct {
	seq   uint64      // 0 = none
	timer *time.Timer // runs wake when the held ack is to be written
	armed bool        // the timer runs for the held seq
	fired atomic.Bool // the timer has run: the held ack is due
}

// hold holds an ack of seq; the first one held starts the wait, at the
// end of which wake is called.
func (h *heldAck) hold(seq uint64, d time.Duration, wake func()) {
	h.seq = max(h.seq, seq)
	if h.armed {
		return
	}
	h.armed = true
	// Real time, as write deadlines: it paces writes, says nothing of the data.
	if h.timer == nil {
		h.timer = time.AfterFunc(d, func() {
			h.fired.Store(true)
			wake()
		})
	} else {
		h.timer.Reset(d)
	}
}

// take returns the held seq (0 = none) and holds nothing more.
func (h *heldAck) take() uint64 {
	seq := h.seq
	h.seq = 0
	if h.armed {
		h.timer.Stop()
		h.armed = false
	}
	return seq
}

// stop releases the timer.
func (h *heldAck) stop() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// CloseGrace bounds how long a session that goes away waits for the
// agent's answer to its close frame.
const CloseGrace = time.Second

// writer is the writing side of a session. No goroutine waits on an
// idle connection: kick starts one when something is ready to write
// (a queued message, an answer, a held ack that is due, a going away),
// which writes what is ready and ends once nothing is; one runs at a
// time. A goroutine and its stack for each of thousands of mostly
// quiet connections (one batch a second each) was megabytes.
type writer struct {
	mu      sync.Mutex
	running bool           // a writer goroutine runs
	again   bool           // something was made ready while it ran: it looks again
	ended   bool           // the session's writes have ended (a write failed, it went away, it ended): none runs again
	done    chan struct{}  // closed when ended is set; nil for a session serving no connection (tests)
	wg      sync.WaitGroup // the running writer

	// Owned by the running writer goroutine.
	ctx      context.Context    // the session's
	wctx     context.Context    // the current write deadline (see write)
	cancel   context.CancelFunc // wctx's
	deadline time.Time
	welcomed bool // the first queued message is written
	spare    [][]byte
	held     heldAck
}

// kick has a writer goroutine write what is ready: it starts one, or
// has the running one look again before it ends.
func (s *session) kick() {
	w := &s.w
	w.mu.Lock()
	if w.done == nil || w.ended {
		w.mu.Unlock()
		return
	}
	if w.running {
		w.again = true
		w.mu.Unlock()
		return
	}
	w.running = true
	w.wg.Add(1)
	w.mu.Unlock()
	go s.writeSome()
}

// writeSome is the writer goroutine: it writes what is ready until
// nothing is, or the session's writes end.
func (s *session) writeSome() {
	w := &s.w
	defer w.wg.Done()
	for {
		ok := s.writeReady()
		w.mu.Lock()
		if !ok {
			w.running = false
			w.endLocked()
			w.mu.Unlock()
			return
		}
		if !w.again {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
	}
}

func (w *writer) endLocked() {
	if !w.ended {
		w.ended = true
		close(w.done)
	}
}

// stopWriter ends the session's writes and waits for a running writer
// (after the session's context is canceled, it stops at its next write).
func (s *session) stopWriter() {
	w := &s.w
	w.mu.Lock()
	w.endLocked()
	w.mu.Unlock()
	w.wg.Wait()
	w.cancel()
	w.held.stop()
}

// write writes one message with a timeout; a failed write ends the
// session. Each write has between half of WriteTimeout and all of it: a
// deadline is made anew only when less than half is left, not for every
// message (a timer a write, thousands a second, otherwise).
func (s *session) write(data []byte) bool {
	w := &s.w
	if now := time.Now(); w.wctx == nil || w.deadline.Sub(now) < s.c.cfg.WriteTimeout/2 {
		w.cancel()
		w.deadline = now.Add(s.c.cfg.WriteTimeout)
		w.wctx, w.cancel = context.WithDeadline(w.ctx, w.deadline)
	}
	if err := s.conn.Write(w.wctx, websocket.MessageText, data); err != nil {
		s.cancel()
		return false
	}
	return true
}

// writeQueued writes what the outbox holds, and reports how many
// messages that was.
func (s *session) writeQueued() (int, bool) {
	w := &s.w
	batch := s.out.swap(w.spare)
	for i, data := range batch {
		if !s.write(data) {
			return i, false
		}
		batch[i] = nil
		w.welcomed = true
	}
	n := len(batch)
	if cap(batch) > outboxKeep {
		batch = nil
	}
	w.spare = batch[:0]
	return n, true
}

// writeInOrder writes what the outbox holds and then, when answers is
// set, the answers to the batches complete before it was taken, in that
// order: the welcome and the commands the handshake queued for the
// instance go before the ack of any batch of the connection. The answers
// are counted first and the outbox taken after: a batch complete at the
// count was read after the handshake had queued everything, so what the
// outbox then holds is all of that. (Counted after the outbox was taken,
// an answer could overtake commands the handshake queued while the
// writer wrote the ones before them.) A batch complete after the count
// signals saves.ready again, for the next pass. It reports false when
// the session's writes have ended.
func (s *session) writeInOrder(ctx context.Context, answers bool) bool {
	n := 0
	if answers {
		n = s.saves.completeFront()
	}
	if _, ok := s.writeQueued(); !ok {
		return false
	}
	return n == 0 || s.answer(ctx, s.write, &s.w.held, n)
}

// writeReady writes the queued messages and the answers to batches (see
// answer) that are ready, and a held ack that is due; it reports false
// when the session's writes have ended: its context is done, a write
// failed, or it went away. Messages queued before answers are ready are
// written before them (the welcome and the commands waiting for the
// instance go first). On goingAway it writes the answers
// that are ready and what is queued (the error naming why last), sends
// a close frame with the status of the ending and ends the session.
func (s *session) writeReady() bool {
	w := &s.w
	ctx := w.ctx
	if ctx.Err() != nil {
		return false
	}
	if w.held.fired.Swap(false) {
		if seq := w.held.take(); seq > 0 && !s.write(ackBytes(seq)) {
			return false
		}
	}
	// The outbox's ready signal is taken with what it holds: a kick
	// follows every message queued to an empty outbox.
	select {
	case <-s.out.ready:
	default:
	}
	answers := false
	select {
	case <-s.saves.ready:
		answers = true
	default:
	}
	if !s.writeInOrder(ctx, answers) {
		return false
	}
	select {
	case <-s.goAway:
		return s.writeGoingAway(ctx)
	default:
		return true
	}
}

// writeGoingAway ends a session that goes away (see writeReady): the
// answers that are ready and what is queued, the error naming why last,
// then the close frame. It returns false: the session's writes end.
func (s *session) writeGoingAway(ctx context.Context) bool {
	w := &s.w
	if !s.writeInOrder(ctx, w.welcomed) {
		return false
	}
	if seq := w.held.take(); seq > 0 && !s.write(ackBytes(seq)) {
		return false
	}
	for {
		n, ok := s.writeQueued()
		if !ok {
			return false
		}
		if n == 0 {
			break
		}
	}
	s.mu.Lock()
	reason, code, retry := s.closing, s.closeCode, s.closeRetry
	s.mu.Unlock()
	// Last, and whatever the outbox holds (a full one refuses no
	// more messages): the error naming why.
	data, _ := json.Marshal(protocol.Error{Type: protocol.TypeError, Reason: reason, Fatal: true, Retry: retry})
	if !s.write(data) {
		return false
	}
	s.closeWithin(ctx, code, reason)
	s.kill(reason)
	return false
}

// send queues v without blocking; when the agent does not read and the
// queue is full, the session is closed (the agent will reconnect, and
// pending commands are delivered again then).
func (s *session) send(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		s.c.log.Error("encode message", "err", err)
		return
	}
	if !s.out.put(data) {
		s.kill("agent does not read its messages")
	}
}

// sendWait queues v, waiting for room (used by the handshake for the
// commands pending for the instance, which may be more than fit).
func (s *session) sendWait(ctx context.Context, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		s.c.log.Error("encode message", "err", err)
		return
	}
	s.out.putWait(ctx, data)
}

// errOverLimit is the cause of a retry-later refusal for a limit of the
// collector on connections (too many connections for one agent token, too
// many hellos on one connection): not the collector's trouble, so fatal
// closes with 1013 (try again later), not 1011.
var errOverLimit = errors.New("over a connection limit of the collector")

// fatal sends a fatal error directly and closes the connection: with
// status 1008 (policy violation) when the refusal is permanent, 1013 (try
// again later) for a retry-later over a limit (errOverLimit), 1011
// (internal error) when it is the collector's trouble and the agent should
// retry later (after retry_after_ms when the refusal says when: the
// store's trouble, see StoreRetryAfter).
func (s *session) fatal(ctx context.Context, rf *refusal) {
	reason := truncate(rf.Reason, 500)
	e := protocol.Error{Type: protocol.TypeError, Reason: reason, Fatal: true, Retry: !rf.Permanent()}
	if e.Retry {
		e.RetryAfterMillis = rf.retryAfter.Milliseconds()
	}
	data, _ := json.Marshal(e)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.cfg.WriteTimeout)
	defer cancel()
	code := websocket.StatusPolicyViolation
	if !rf.Permanent() {
		code = websocket.StatusInternalError
	}
	if errors.Is(rf, errOverLimit) {
		code = websocket.StatusTryAgainLater
	}
	if s.conn.Write(wctx, websocket.MessageText, data) == nil {
		s.closeWithin(ctx, code, reason)
	}
}

// closeWithin sends a close frame with code and reason and waits for the
// agent's answer for CloseGrace at most, then cuts the connection (the
// websocket would wait 5 s, and its CloseNow waits for a close under way):
// a peer that does not answer its close is not kept on.
func (s *session) closeWithin(ctx context.Context, code websocket.StatusCode, reason string) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = s.conn.Close(code, truncate(reason, 100))
	}()
	t := time.NewTimer(CloseGrace)
	defer t.Stop()
	select {
	case <-closed:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	if s.raw != nil {
		_ = s.raw.Close() // ends the close under way
	}
	<-closed
}

// goingAway ends the session with an error naming why and close status
// 1001 (going away): the collector is shutting down, or a newer connection
// of the instance replaced this one. The writer goroutine owns writes, so
// the error is queued to it; the close follows once it is written (or
// after WriteTimeout).
func (s *session) goingAway(reason string) {
	s.ending(reason, true, websocket.StatusGoingAway)
}

// revoked ends a session whose agent token was revoked or has expired:
// a permanent fatal error (no retry: the token will not work again) and
// close status 1008 (policy violation), as for a bad token in a hello.
func (s *session) revoked() {
	s.ending("agent token revoked or expired (unauthorized)", false, websocket.StatusPolicyViolation)
}

// ending has the writer goroutine write a fatal error (retry or not),
// after every answer and queued message, and close the connection with
// code.
func (s *session) ending(reason string, retry bool, code websocket.StatusCode) {
	s.mu.Lock()
	if s.dead || s.closing != "" {
		s.mu.Unlock()
		return
	}
	s.closing, s.closeCode, s.closeRetry = reason, code, retry
	s.mu.Unlock()
	select {
	case s.goAway <- struct{}{}:
	default:
	}
	s.kick()
}

// replaced ends a session that a newer connection of the same instance
// replaces.
func (s *session) replaced() {
	s.goingAway("replaced by a newer connection of the same instance")
}

// kill ends the session without blocking the caller.
func (s *session) kill(reason string) {
	s.mu.Lock()
	first := !s.dead
	s.dead = true
	key := s.key // set by the handshake, which may be running
	s.mu.Unlock()
	if first {
		s.c.log.Info("closing agent connection", "service", key.Service, "instance", key.Instance, "reason", reason)
	}
	s.cancel()
}
