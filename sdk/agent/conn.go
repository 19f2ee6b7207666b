package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Timeouts of the connection. Each write has its own deadline so that a
// collector that stops reading costs a reconnect, never a stuck agent.
const (
	writeTimeout   = 10 * time.Second
	ackTimeout     = 30 * time.Second // a batch unacknowledged this long means a dead collector
	closeTimeout   = time.Second      // for the closing handshake
	failbackDrain  = 10 * time.Second // the longest a failback waits for the acknowledgements of what was sent
	ackCheckPeriod = ackTimeout / 4
)

// Reasons a session ends that are not failures of the collector.
var (
	errAckTimeout = errors.New("no acknowledgement from the collector")
)

// refusedForGood is a fatal error without retry from the collector
// (docs/protocol.md, "Closing and fatal errors"): the token or the hello
// is wrong, or over a quota, and reconnecting with them gets the same
// answer. The agent logs it as an error and reconnects only at the
// longest backoff (Config.ReconnectMax), in case an operator changes
// the token or the quota.
type refusedForGood struct{ reason string }

func (e *refusedForGood) Error() string {
	return "the collector refused this agent for good: " + e.reason
}

// Waits between connection attempts that are not the exponential backoff.
const (
	// refusedCap bounds the wait after a dial that nothing answered
	// (connection refused, no route to the host): such a dial costs the
	// collector nothing, and an agent started before its collector, or
	// waiting for one that restarts, is back within about a second of it
	// listening. Config.ReconnectMax bounds it too.
	refusedCap = time.Second
	// minRetryAfter is the shortest wait a collector's retry_after_ms gets
	// (unless Config.ReconnectMax is shorter).
	minRetryAfter = 100 * time.Millisecond
	// maxRetryAfterMillis keeps a huge retry_after_ms from overflowing a
	// time.Duration; ReconnectMax bounds the wait anyway.
	maxRetryAfterMillis = int64(24 * time.Hour / time.Millisecond)
	// failureLogEvery is how often a series of failed connection attempts
	// is logged after its first failure.
	failureLogEvery = 30 * time.Second
)

// retryLater is a fatal error with retry from the collector
// (docs/protocol.md, "Closing and fatal errors"): its own trouble or a
// normal close. after is the collector's protocol.Error.RetryAfterMillis,
// 0 when it gave none.
type retryLater struct {
	reason  string
	atHello bool
	after   time.Duration
}

func newRetryLater(e *protocol.Error, atHello bool) *retryLater {
	r := &retryLater{reason: e.Reason, atHello: atHello}
	if e.Fatal && e.Retry && e.RetryAfterMillis > 0 {
		r.after = time.Duration(min(e.RetryAfterMillis, maxRetryAfterMillis)) * time.Millisecond
	}
	return r
}

func (e *retryLater) Error() string {
	if e.atHello {
		return "the collector refused the hello: " + e.reason
	}
	return "fatal error from the collector: " + e.reason
}

// errFailback ends a session with another collector than the preferred
// one once the preferred one has been ready long enough (see
// Config.FailbackAfter).
var errFailback = errors.New("moving back to the preferred collector")

// maxAskedBack is how many fatal errors with retry_after_ms in a row an
// agent answers by coming back to the same collector; the next one sends
// it to the next of Config.URLs.
const maxAskedBack = 5

// notListening reports whether err is a dial that no collector answered:
// the connection was refused (nothing listens on the port) or the host or
// network is unreachable. It costs the collector nothing.
func notListening(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// jitter returns a random duration in [d/2, d].
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// retryAfterWait is the wait the collector's hint after asks for: a random
// duration in [after, 1.5*after], at least minRetryAfter, at most longest.
func retryAfterWait(after, longest time.Duration) time.Duration {
	lo := max(after, minRetryAfter)
	hi := lo + lo/2
	lo, hi = min(lo, longest), min(hi, longest)
	return lo + rand.N(hi-lo+1)
}

// failureLog rate-limits the warnings of a series of failed connection
// attempts: the first failure is logged, then at most one every
// failureLogEvery, counting the failures since the last one logged. The
// series ends (reset) with a session that did its job.
type failureLog struct {
	last  time.Time // when the last warning was logged; zero: none in this series
	quiet int       // failures not logged since
}

// note counts a failure at now and reports whether to log it, and if so
// how many failures the warning covers (this one and those not logged).
func (l *failureLog) note(now time.Time) (log bool, failures int) {
	if since := now.Sub(l.last); !l.last.IsZero() && since >= 0 && since < failureLogEvery {
		l.quiet++
		return false, 0
	}
	failures = l.quiet + 1
	l.last, l.quiet = now, 0
	return true, failures
}

func (l *failureLog) reset() { *l = failureLog{} }

// connLoop is the agent's connection goroutine: it keeps one session with
// a collector up, reconnecting with exponential backoff and jitter. Each
// attempt after a session ended (or failed to start) goes to the next of
// Config.URLs: with one URL that is the same collector again. The waits
// that are not the backoff: a collector's retry_after_ms, a dial nothing
// answered (at most refusedCap), a refusal for good (ReconnectMax), and
// none when the agent leaves another collector for the preferred one
// (Config.FailbackAfter).
func (a *Agent) connLoop(ctx context.Context) {
	defer a.wg.Done()
	backoff := a.cfg.ReconnectMin
	sessions := 0
	preferred := firstURL(a.cfg.Service, a.cfg.Instance, a.cfg.URLs)
	next := preferred
	var failures failureLog
	askedBack := 0 // retry_after_ms answers in a row from the collector at cur
	for ctx.Err() == nil {
		cur := next
		url := a.cfg.URLs[cur]
		next = (next + 1) % len(a.cfg.URLs)
		welcomed, progressed, err := a.session(ctx, url, a.cfg.URLs[preferred], sessions > 0)
		if welcomed {
			sessions++
		}
		// The backoff starts again only after a session that did its job:
		// welcomed is not enough when the collector then fails every batch
		// (a store that cannot commit): that agent backs off as when the
		// collector is down.
		if progressed {
			backoff = a.cfg.ReconnectMin
			failures.reset()
			askedBack = 0
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errFailback) {
			next = preferred
			continue
		}
		var (
			forGood *refusedForGood
			later   *retryLater
			wait    time.Duration
			grow    = true
		)
		switch {
		case errors.As(err, &forGood):
			backoff = a.cfg.ReconnectMax
			wait = jitter(backoff)
		case errors.As(err, &later) && later.after > 0:
			// The collector asked this agent back: to it, not the next
			// one (its store's trouble is every collector's over a
			// shared database, and the fleet should not move for it),
			// but for maxAskedBack times in a row only: a collector cut
			// off from a database the others reach must not keep its
			// agents for ever.
			wait, grow = retryAfterWait(later.after, a.cfg.ReconnectMax), false
			if askedBack++; askedBack < maxAskedBack {
				next = cur
			} else {
				askedBack = 0
			}
		case notListening(err):
			wait, grow = jitter(min(backoff, refusedCap, a.cfg.ReconnectMax)), false
		default:
			wait = jitter(backoff)
		}
		if forGood != nil {
			a.log.Error("the collector refused this agent for good (fix the token, the hello or the collector's quotas); retrying at the longest backoff",
				"reason", forGood.reason, "retry_in", wait, "next_url", a.cfg.URLs[next])
		} else if log, n := failures.note(a.cfg.Clock.Now()); log && n == 1 {
			a.log.Warn("collector connection lost, retrying", "error", err, "retry_in", wait, "next_url", a.cfg.URLs[next])
		} else if log {
			a.log.Warn("collector connection still failing, retrying", "failures_since_last_warning", n,
				"error", err, "retry_in", wait, "next_url", a.cfg.URLs[next])
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if grow {
			backoff = min(backoff*2, a.cfg.ReconnectMax)
		}
	}
}

// session runs one connection: dial, hello, welcome, then batches out and
// acks and commands in, until the connection fails or ctx ends. welcomed
// reports whether the collector accepted the hello; progressed that it
// also acknowledged a batch sent on the connection, or that no batch was
// waiting for an acknowledgement when the connection ended. preferred is
// the collector to move back to when url is another one (see
// Config.FailbackAfter); the session then ends with errFailback.
func (a *Agent) session(ctx context.Context, url, preferred string, reconnect bool) (welcomed, progressed bool, err error) {
	welcomed, err = a.run(ctx, url, preferred, reconnect, &progressed)
	return welcomed, progressed, err
}

func (a *Agent) run(ctx context.Context, url, preferred string, reconnect bool, progressed *bool) (welcomed bool, err error) {
	hello, gen := a.hello()
	conn, welcome, err := a.handshake(ctx, url, &hello)
	if err != nil {
		return false, err
	}
	defer conn.CloseNow()
	if reconnect {
		a.reconnects.Add(1)
	}
	if ahead := a.out.welcome(welcome.LastSeq); ahead {
		a.log.Warn("the collector holds batches this agent did not send; skipping ahead", "last_seq", welcome.LastSeq)
	}
	acked := a.out.stats().acked
	defer func() {
		_, waiting := a.out.unackedSince()
		*progressed = a.out.stats().acked > acked || !waiting
	}()
	a.collector.Store(&url)
	a.connected.Store(true)
	defer func() {
		a.connected.Store(false)
		a.collector.Store(nil)
		a.endDeferrals("the collector was lost")
	}()
	a.log.Info("connected to the collector", "url", url, "last_seq", welcome.LastSeq)
	if skew := time.Duration(welcome.ServerTime-a.cfg.Clock.Now().UnixMilli()) * time.Millisecond; welcome.ServerTime > 0 && skew.Abs() > time.Minute {
		// The collector refuses times more than protocol.MaxFutureSkewMillis
		// ahead of its clock.
		a.log.Warn("this host's clock and the collector's differ", "skew", skew)
	}

	sctx, cancel := context.WithCancel(ctx)
	readDone := make(chan struct{})
	var readErr error
	go func() {
		defer close(readDone)
		readErr = a.readLoop(sctx, conn)
	}()
	defer func() {
		cancel()
		<-readDone
	}()

	// Failback: a goroutine watches the preferred collector and closes
	// moveBack once it has been ready long enough; the session then stops
	// writing, waits (at most failbackDrain) for what it wrote to be
	// acknowledged, and closes normally.
	var moveBack chan struct{}
	if url != preferred && a.cfg.FailbackAfter > 0 {
		moveBack = make(chan struct{})
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			a.watchPreferred(sctx, preferred, moveBack)
		}()
		defer func() {
			cancel()
			<-watchDone
		}()
	}
	var drainTimeout <-chan time.Time
	draining := false

	check := time.NewTicker(ackCheckPeriod)
	defer check.Stop()
	for {
		if draining {
			if _, waiting := a.out.unackedSince(); !waiting {
				a.closeGracefully(conn, websocket.StatusNormalClosure, "moving back to the preferred collector")
				return true, errFailback
			}
		} else if err := a.writePending(ctx, conn, &gen); err != nil {
			return true, err
		}
		select {
		case <-ctx.Done():
			a.closeGracefully(conn, websocket.StatusNormalClosure, "agent closing")
			return true, ctx.Err()
		case <-readDone:
			return true, readErr
		case <-a.sendReady:
		case <-moveBack:
			moveBack, draining = nil, true
			t := time.NewTimer(failbackDrain)
			defer t.Stop()
			drainTimeout = t.C
			a.log.Info("the preferred collector has been ready long enough; moving back to it once this one has acknowledged what it was sent",
				"url", url, "preferred", preferred, "ready_for_at_least", a.cfg.FailbackAfter)
		case <-drainTimeout:
			// What is unacknowledged is resent to the preferred collector,
			// whose welcome (last_seq, from the shared store) keeps what
			// this one stored from being stored twice.
			a.closeGracefully(conn, websocket.StatusNormalClosure, "moving back to the preferred collector")
			return true, errFailback
		case <-check.C:
			if since, ok := a.out.unackedSince(); ok && time.Since(since) > ackTimeout {
				return true, fmt.Errorf("%w for %v", errAckTimeout, time.Since(since).Round(time.Second))
			}
		}
	}
}

// handshake dials the collector at url, sends hello and waits for its
// welcome, all within Config.HandshakeTimeout.
func (a *Agent) handshake(ctx context.Context, url string, hello *protocol.Hello) (*websocket.Conn, *protocol.Welcome, error) {
	hctx, cancel := context.WithTimeout(ctx, a.cfg.HandshakeTimeout)
	defer cancel()
	header := http.Header{}
	if a.cfg.Token != "" {
		header.Set("Authorization", "Bearer "+a.cfg.Token)
	}
	conn, resp, err := websocket.Dial(hctx, url, &websocket.DialOptions{
		HTTPClient: a.cfg.HTTPClient, HTTPHeader: header, Subprotocols: []string{protocol.Subprotocol},
	})
	if err != nil {
		if resp != nil {
			return nil, nil, fmt.Errorf("dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, nil, fmt.Errorf("dial %s: %w", url, err)
	}
	conn.SetReadLimit(protocol.MaxMessageBytes)
	fail := func(err error) (*websocket.Conn, *protocol.Welcome, error) {
		conn.CloseNow()
		return nil, nil, err
	}
	if sp := conn.Subprotocol(); sp != protocol.Subprotocol {
		return fail(fmt.Errorf("the collector chose subprotocol %q, not %q", sp, protocol.Subprotocol))
	}
	data, err := json.Marshal(hello)
	if err != nil {
		return fail(fmt.Errorf("encoding hello: %w", err))
	}
	if err := conn.Write(hctx, websocket.MessageText, data); err != nil {
		return fail(fmt.Errorf("sending hello: %w", err))
	}
	for {
		_, data, err := conn.Read(hctx)
		if err != nil {
			return fail(fmt.Errorf("waiting for welcome: %w", err))
		}
		var env protocol.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return fail(fmt.Errorf("waiting for welcome: malformed message: %w", err))
		}
		switch env.Type {
		case protocol.TypeWelcome:
			var w protocol.Welcome
			if err := json.Unmarshal(data, &w); err != nil {
				return fail(fmt.Errorf("malformed welcome: %w", err))
			}
			if w.Protocol != 0 && w.Protocol != protocol.Version {
				return fail(fmt.Errorf("the collector speaks protocol %d, not %d", w.Protocol, protocol.Version))
			}
			return conn, &w, nil
		case protocol.TypeError:
			var e protocol.Error
			_ = json.Unmarshal(data, &e)
			if e.Fatal && !e.Retry {
				return fail(&refusedForGood{reason: e.Reason})
			}
			return fail(newRetryLater(&e, true))
		default:
			a.log.Warn("message before welcome ignored", "type", env.Type)
		}
	}
}

// writePending writes every batch the outbox has for this connection,
// which has declared the breakers of hello generation *gen. When the
// declared breakers have changed since (a Register, or an unregistered
// breaker pruned), it first sends a new hello on the same connection (the
// collector does not answer it).
func (a *Agent) writePending(ctx context.Context, conn *websocket.Conn, gen *uint64) error {
	a.queue() // transitions go out from here, without waiting for the report goroutine
	a.prune()
	for {
		needHello := a.currentHelloGen() > *gen
		var (
			seq  uint64
			data []byte
			ok   bool
		)
		if !needHello {
			seq, data, ok, needHello = a.out.next(a.cfg.Clock.Now().UnixMilli(), *gen)
		}
		if needHello {
			hello, g := a.hello()
			if err := a.write(ctx, conn, &hello); err != nil {
				return fmt.Errorf("sending a new hello: %w", err)
			}
			*gen = g
			continue
		}
		if !ok {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := conn.Write(wctx, websocket.MessageText, data)
		cancel()
		if err != nil {
			return fmt.Errorf("sending batch %d: %w", seq, err)
		}
	}
}

// write encodes v and writes it with its own timeout.
func (a *Agent) write(ctx context.Context, conn *websocket.Conn, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, data)
}

// closeGracefully runs the websocket closing handshake, but no longer
// than closeTimeout: a collector that does not answer is cut off.
func (a *Agent) closeGracefully(conn *websocket.Conn, code websocket.StatusCode, reason string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.Close(code, reason)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = conn.CloseNow()
		<-done
	}
}

// readLoop handles what the collector sends until the connection fails.
// Bad input is logged and refused; only a broken connection (including a
// frame over protocol.MaxMessageBytes, which the websocket library refuses
// by closing with status 1009) or a fatal error ends it.
func (a *Agent) readLoop(ctx context.Context, conn *websocket.Conn) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("reading: %w", err)
		}
		if typ != websocket.MessageText {
			a.log.Warn("binary message from the collector refused", "bytes", len(data))
			continue
		}
		if err := a.handle(ctx, data); err != nil {
			return err
		}
	}
}

// handle acts on one message from the collector. It returns an error only
// when the connection must end.
func (a *Agent) handle(ctx context.Context, data []byte) error {
	var env protocol.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		a.log.Warn("malformed message from the collector refused", "error", err, "bytes", len(data))
		return nil
	}
	switch env.Type {
	case protocol.TypeAck:
		var m protocol.Ack
		if err := json.Unmarshal(data, &m); err != nil {
			a.log.Warn("malformed ack refused", "error", err)
			return nil
		}
		a.out.ack(m.Seq)
		signal(a.sendReady)
	case protocol.TypeError:
		var m protocol.Error
		if err := json.Unmarshal(data, &m); err != nil {
			a.log.Warn("malformed error message refused", "error", err)
			return nil
		}
		if m.Seq != 0 {
			known := a.out.refuse(m.Seq)
			a.log.Error("the collector refused a batch; it is dropped", "seq", m.Seq, "reason", m.Reason, "in_flight", known)
			signal(a.sendReady)
		} else {
			a.log.Error("the collector reported an error", "reason", m.Reason, "fatal", m.Fatal)
		}
		if m.Fatal && !m.Retry {
			return &refusedForGood{reason: m.Reason}
		}
		if m.Fatal {
			return newRetryLater(&m, false)
		}
	case protocol.TypeCommand:
		var m protocol.Command
		in := inCommand{}
		if err := json.Unmarshal(data, &m); err != nil {
			// Answer it if at least its id can be read, so the operator
			// learns why nothing happened.
			var id struct {
				ID      string `json:"id"`
				Breaker string `json:"breaker"`
			}
			_ = json.Unmarshal(data, &id)
			m = protocol.Command{ID: id.ID, Breaker: id.Breaker}
			in.malformed = err
		}
		in.cmd = m
		select {
		case a.cmds <- in:
		case <-ctx.Done():
			return ctx.Err()
		}
	case protocol.TypeWelcome:
		a.log.Warn("unexpected welcome ignored")
	default:
		a.log.Warn("message of unknown type from the collector ignored", "type", env.Type)
	}
	return nil
}
