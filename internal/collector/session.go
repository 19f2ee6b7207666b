package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
)

// outQueue is how many messages may wait for the agent's socket; a session
// whose agent lets it fill is closed (the agent reconnects and resends).
const outQueue = 256

// saveQueue is how many validated batches of one connection may wait for
// their commit; when it is full the connection stops reading (the agent's
// own backpressure).
const saveQueue = 64

// session is one agent websocket connection. The handler goroutine reads;
// a writer goroutine owns writes; a saver goroutine commits batches in
// order and acknowledges them.
type session struct {
	c      *Collector
	conn   *websocket.Conn
	cancel context.CancelFunc

	// Set by the handshake, read-only afterwards.
	key       instKey
	startedAt int64
	hello     *protocol.Hello
	service   string // the token's service, "" = any
	// lastQueued is the highest seq queued to the saver (or stored before
	// the connection); owned by the reading goroutine.
	lastQueued uint64

	noMerge bool          // set by the handshake: store batch by batch
	done    chan struct{} // closed when the session has ended

	out  chan []byte
	mu   sync.Mutex
	dead bool
}

// saveItem is a validated batch to commit, or, in order with them, a
// refusal or the ack of a duplicate.
type saveItem struct {
	batch   *protocol.Batch
	at      time.Time
	seq     uint64
	reason  string // refused: the reason
	ackOnly bool   // a duplicate: acknowledged, not stored
}

// handleAgent serves GET /api/v1/agent.
func (c *Collector) handleAgent(ec echo.Context) error {
	r, w := ec.Request(), ec.Response()
	if !c.isReady() {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "collector is not ready")
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       []string{protocol.Subprotocol},
		InsecureSkipVerify: true, // agents are not browsers: the token is the credential
	})
	if err != nil {
		return nil // Accept has written the response
	}
	ctx, cancel := context.WithCancel(r.Context())
	s := &session{c: c, conn: conn, cancel: cancel, out: make(chan []byte, outQueue), done: make(chan struct{})}
	defer close(s.done)
	defer cancel()
	if !c.addSession(s) {
		conn.Close(websocket.StatusGoingAway, "collector stopping")
		return nil
	}
	defer c.removeSession(s)
	s.run(ctx, bearer(r))
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
	if s.conn.Subprotocol() != protocol.Subprotocol {
		s.conn.Close(websocket.StatusPolicyViolation, "subprotocol "+protocol.Subprotocol+" required")
		return
	}
	s.conn.SetReadLimit(protocol.MaxMessageBytes)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.writeLoop(ctx)
	}()
	defer wg.Wait()
	defer s.cancel()

	if !s.handshake(ctx, token) {
		return
	}
	defer s.c.live.disconnect(s.key, s)
	s.c.log.Debug("agent connected", "service", s.key.service, "instance", s.key.instance)

	queue := make(chan saveItem, saveQueue)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.saveLoop(ctx, queue)
	}()
	s.readLoop(ctx, queue)
	close(queue)
}

// handshake checks the token and the hello, records the hello and sends the
// welcome and the commands pending for the instance. On failure it has sent
// a fatal error and closed the connection.
func (s *session) handshake(ctx context.Context, token string) bool {
	c := s.c
	svc, err := c.store.CheckAgentToken(ctx, token)
	if err != nil {
		if errors.Is(err, cbdash.ErrUnauthorized) {
			s.fatal(ctx, "bad or missing agent token")
		} else {
			c.log.Error("check agent token", "err", err)
			s.fatal(ctx, "collector error checking the token; retry later")
		}
		return false
	}
	s.service = svc
	hctx, cancel := context.WithTimeout(ctx, c.cfg.HelloTimeout)
	_, data, err := s.conn.Read(hctx)
	cancel()
	if err != nil {
		return false
	}
	m, _, err := decode(data)
	if err != nil {
		s.fatal(ctx, err.Error())
		return false
	}
	if m.Hello == nil {
		s.fatal(ctx, "the first message must be a hello")
		return false
	}
	h := m.Hello
	if err := s.checkHello(h); err != nil {
		s.fatal(ctx, err.Error())
		return false
	}
	// A previous connection of the same instance must be gone, its last
	// commit finished, before last_seq is read: then the store's last seq
	// is final and only this connection writes after it (which is what
	// makes merging queued batches safe).
	if prev := c.live.session(instKey{h.Service, h.Instance}); prev != nil {
		prev.kill("replaced by a newer connection of the same instance")
		// Real time: the wait is for a socket to close, not a logical delay.
		wait := time.NewTimer(c.cfg.HelloTimeout)
		select {
		case <-prev.done:
			wait.Stop()
		case <-wait.C:
			s.fatal(ctx, "the previous connection of this instance is still closing; retry later")
			return false
		case <-ctx.Done():
			wait.Stop()
			return false
		}
	}
	now := c.now()
	if err := c.store.SaveHello(ctx, *h, now); err != nil {
		c.log.Error("save hello", "err", err)
		s.fatal(ctx, "collector could not record the hello; retry later")
		return false
	}
	last, err := c.store.LastSeq(ctx, h.Service, h.Instance, h.StartedAt)
	if err != nil {
		c.log.Error("last seq", "err", err)
		s.fatal(ctx, "collector could not read the last sequence number; retry later")
		return false
	}
	s.key, s.startedAt, s.hello, s.lastQueued = instKey{h.Service, h.Instance}, h.StartedAt, h, last
	// The welcome is queued as the instance is registered: a command issued
	// from then on is sent after it; commands issued before are read below.
	welcome := func() {
		s.send(protocol.Welcome{Type: protocol.TypeWelcome, Protocol: protocol.Version, LastSeq: last, ServerTime: now.UnixMilli()})
	}
	if prev := c.live.hello(h, last, s, now, welcome); prev != nil {
		// Another connection of the instance came and went meanwhile: its
		// commits may overlap ours, so this one stores batch by batch.
		prev.kill("replaced by a newer connection of the same instance")
		s.noMerge = true
	}
	cmds, err := c.store.PendingCommands(ctx, h.Service, h.Instance, now)
	if err != nil {
		c.log.Error("pending commands", "err", err)
	}
	for _, cmd := range cmds {
		s.send(wireCommand(cmd, now))
	}
	return true
}

// checkHello validates a hello and that the token may speak for its service.
func (s *session) checkHello(h *protocol.Hello) error {
	if err := h.Validate(); err != nil {
		return err
	}
	if h.StartedAt < 0 {
		return fmt.Errorf("%w: started_at is negative", protocol.ErrInvalid)
	}
	if s.service != "" && h.Service != s.service {
		return fmt.Errorf("the agent token is limited to service %q, not %q", s.service, h.Service)
	}
	return nil
}

// readLoop reads messages until the connection ends, validating batches,
// applying them to live state and queueing them for the saver. A batch at
// or below the last one queued on this connection (or stored before it)
// is a duplicate: it is acknowledged in turn, never stored again.
func (s *session) readLoop(ctx context.Context, queue chan<- saveItem) {
	c := s.c
	for {
		_, data, err := s.conn.Read(ctx)
		if err != nil {
			return
		}
		now := c.now()
		m, seq, err := decode(data)
		if err == nil && m.Hello != nil {
			if err := s.rehello(ctx, m.Hello, now); err != nil {
				s.fatal(ctx, err.Error())
				return
			}
			continue
		}
		if err == nil {
			err = m.Batch.Validate(s.hello, now.UnixMilli())
		}
		it := saveItem{seq: seq, at: now}
		switch {
		case err != nil:
			c.metrics.batches.WithLabelValues("refused").Inc()
			it.reason = err.Error()
			c.log.Info("batch refused", "service", s.key.service, "instance", s.key.instance, "seq", seq, "reason", it.reason)
		case seq <= s.lastQueued:
			c.metrics.batches.WithLabelValues("duplicate").Inc()
			it.ackOnly = true
		default:
			s.lastQueued = seq
			it.batch = m.Batch
			if !c.live.enqueue(ctx, s.key, m.Batch, now) {
				return
			}
			c.metrics.queue.Inc()
		}
		select {
		case queue <- it:
		case <-ctx.Done():
			if it.batch != nil {
				c.metrics.queue.Dec()
			}
			return
		}
	}
}

// rehello accepts a new hello on an open connection when it names the same
// agent process (for example after it registered another breaker).
func (s *session) rehello(ctx context.Context, h *protocol.Hello, now time.Time) error {
	if h.Service != s.key.service || h.Instance != s.key.instance || h.StartedAt != s.startedAt {
		return fmt.Errorf("%w: a hello on an open connection must name the same service, instance and started_at", protocol.ErrInvalid)
	}
	if err := s.checkHello(h); err != nil {
		return err
	}
	if err := s.c.store.SaveHello(ctx, *h, now); err != nil {
		return fmt.Errorf("collector could not record the hello: %w", err)
	}
	s.hello = h
	s.c.live.hello(h, 0, s, now, nil)
	return nil
}

// maxMerge bounds how many queued batches of one connection are stored in
// one SaveBatch.
const maxMerge = 64

// saveLoop commits batches in order and acknowledges them after their
// commit (acks are cumulative); refusals and duplicate acks are sent in the
// same order. Batches that queued up while the previous commit ran are
// merged and stored in one SaveBatch under the last one's seq (the store
// records that every seq up to it is stored, which is then true), so a
// connection's throughput does not depend on the commit latency.
func (s *session) saveLoop(ctx context.Context, queue <-chan saveItem) {
	c := s.c
	var next *saveItem // an item taken from the queue but not yet handled
	for {
		if ctx.Err() != nil { // the session ended: nothing more is acknowledged
			for it := range queue {
				if it.batch != nil {
					c.metrics.queue.Dec()
				}
			}
			if next != nil && next.batch != nil {
				c.metrics.queue.Dec()
			}
			return
		}
		var it saveItem
		if next != nil {
			it, next = *next, nil
		} else {
			var ok bool
			if it, ok = <-queue; !ok {
				return
			}
		}
		switch {
		case it.reason != "":
			s.sendWait(ctx, protocol.Error{Type: protocol.TypeError, Seq: it.seq, Reason: it.reason})
			continue
		case it.ackOnly:
			s.sendWait(ctx, protocol.Ack{Type: protocol.TypeAck, Seq: it.seq})
			continue
		}
		group := []*protocol.Batch{it.batch}
		at := it.at
	collect:
		for len(group) < maxMerge && !s.noMerge {
			select {
			case nx, ok := <-queue:
				if !ok {
					break collect
				}
				if nx.batch == nil {
					next = &nx
					break collect
				}
				group, at = append(group, nx.batch), nx.at
			default:
				break collect
			}
		}
		b := merge(group)
		start := time.Now() // real time: the commit duration metric
		// Not canceled with the session: SaveBatch then returns only once
		// the batch is committed or refused, so when the session has ended
		// none of its writes is still pending (see handshake).
		stored, err := c.store.SaveBatch(context.WithoutCancel(ctx), s.key.service, s.key.instance, s.startedAt, *b, at)
		c.metrics.queue.Sub(float64(len(group)))
		if err != nil {
			if ctx.Err() == nil {
				c.metrics.batches.WithLabelValues("failed").Add(float64(len(group)))
				c.log.Error("save batch", "service", s.key.service, "instance", s.key.instance, "seq", b.Seq, "err", err)
				s.kill("store error")
			}
			for it := range queue { // drain: none of these is acknowledged
				if it.batch != nil {
					c.metrics.queue.Dec()
				}
			}
			return
		}
		c.afterSave(b, len(group), stored, start, s.key.instance)
		s.sendWait(ctx, protocol.Ack{Type: protocol.TypeAck, Seq: b.Seq})
	}
}

// merge returns the batches as one: everything they carry, in order, under
// the last one's seq and the first one's sent_at.
func merge(bs []*protocol.Batch) *protocol.Batch {
	if len(bs) == 1 {
		return bs[0]
	}
	last := bs[len(bs)-1]
	m := &protocol.Batch{Type: protocol.TypeBatch, Seq: last.Seq, SentAt: bs[0].SentAt}
	for _, b := range bs {
		m.Transitions = append(m.Transitions, b.Transitions...)
		m.Windows = append(m.Windows, b.Windows...)
		m.CommandResults = append(m.CommandResults, b.CommandResults...)
		if d := b.Dropped; d != nil {
			if m.Dropped == nil {
				m.Dropped = &protocol.Dropped{}
			}
			m.Dropped.Windows += d.Windows
			m.Dropped.Merged += d.Merged
			m.Dropped.Batches += d.Batches
			m.Dropped.Transitions += d.Transitions
			m.Dropped.CommandResults += d.CommandResults
		}
	}
	return m
}

// afterSave counts a committed batch and publishes the commands it
// answered.
func (c *Collector) afterSave(b *protocol.Batch, batches int, stored bool, start time.Time, instance string) {
	c.metrics.commit.Observe(time.Since(start).Seconds())
	if !stored {
		c.metrics.batches.WithLabelValues("duplicate").Add(float64(batches))
		return
	}
	c.metrics.batches.WithLabelValues("stored").Add(float64(batches))
	c.metrics.windows.Add(float64(len(b.Windows)))
	c.metrics.transitions.Add(float64(len(b.Transitions)))
	if b.SentAt > 0 {
		c.metrics.lag.Observe(max(0, float64(c.now().UnixMilli()-b.SentAt)/1000))
	}
	c.metrics.agentDropped(b.Dropped)
	if len(b.CommandResults) > 0 {
		c.commandResults(instance, b.CommandResults)
	}
}

// writeLoop writes queued messages, each with its own timeout, until ctx
// is done; a failed write ends the session.
func (s *session) writeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case data := <-s.out:
			wctx, cancel := context.WithTimeout(ctx, s.c.cfg.WriteTimeout)
			err := s.conn.Write(wctx, websocket.MessageText, data)
			cancel()
			if err != nil {
				s.cancel()
				return
			}
		}
	}
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
	select {
	case s.out <- data:
	default:
		s.kill("agent does not read its messages")
	}
}

// sendWait queues v, waiting for room (used by the saver, which may block
// on its own connection).
func (s *session) sendWait(ctx context.Context, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		s.c.log.Error("encode message", "err", err)
		return
	}
	select {
	case s.out <- data:
	case <-ctx.Done():
	}
}

// fatal sends a fatal error directly and closes the connection.
func (s *session) fatal(ctx context.Context, reason string) {
	reason = truncate(reason, 500)
	data, _ := json.Marshal(protocol.Error{Type: protocol.TypeError, Reason: reason, Fatal: true})
	wctx, cancel := context.WithTimeout(ctx, s.c.cfg.WriteTimeout)
	defer cancel()
	if s.conn.Write(wctx, websocket.MessageText, data) == nil {
		s.conn.Close(websocket.StatusPolicyViolation, truncate(reason, 100))
	}
}

// kill ends the session without blocking the caller.
func (s *session) kill(reason string) {
	s.mu.Lock()
	first := !s.dead
	s.dead = true
	s.mu.Unlock()
	if first {
		s.c.log.Info("closing agent connection", "service", s.key.service, "instance", s.key.instance, "reason", reason)
	}
	s.cancel()
}
