package main

// The security regression suite, connections (issue 27, item 1): an
// unauthenticated client holding connections open, against the server
// as serve wires it, on loopback. The timeouts are real network
// deadlines, so the tests use short real ones; they wait on events (a
// connection closed by the server) with generous bounds, never on time
// alone.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// closeBound is how long a test waits for the server to close a
// connection it should close after a deadline of a second or less: a
// busy machine must not fail the test, a server that never closes must.
const closeBound = 15 * time.Second

// dialFrom connects to addr from the loopback address from (127.0.0.x:
// all of 127/8 is loopback, so one machine is several clients).
func dialFrom(t *testing.T, from, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// clientFrom is an HTTP client whose connections come from from.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// getOn sends GET path on c (HTTP/1.1, keep-alive) and reads the answer.
func getOn(t *testing.T, c net.Conn, br *bufio.Reader, path string) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: cbdash\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// waitClosed reads c until the server closes it, within closeBound; it
// returns what was read and how long it took. (It fails the test with
// Errorf: it may run on a goroutine of its own.)
func waitClosed(t *testing.T, c net.Conn, r io.Reader) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(closeBound))
	b, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection from %s is still open after %v", c.LocalAddr(), closeBound)
	}
	return string(b), time.Since(start)
}

func TestSecurityIdleConnectionsFromOneAddressDoNotStopTheServer(t *testing.T) {
	const perAddress, idle = 4, 500 * time.Millisecond
	ls := startServer(t, func(o *serveOptions) {
		o.Conn = connOptions{PerAddress: perAddress, Total: 1000, IdleTimeout: idle,
			ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	}, nil)
	addr := ls.srv.ln.Addr().String()

	// The attacker, from 127.0.0.3: as many keep-alive connections as it
	// may hold, each after one GET /healthz, then more.
	type held struct {
		c  net.Conn
		br *bufio.Reader
	}
	var idleConns []held
	for range perAddress {
		c, err := dialFrom(t, "127.0.0.3", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if status := getOn(t, c, br, "/healthz"); status != http.StatusOK {
			t.Fatalf("GET /healthz = %d", status)
		}
		idleConns = append(idleConns, held{c, br})
	}
	for i := range 6 {
		c, err := dialFrom(t, "127.0.0.3", addr)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				continue // closed before connect returned
			}
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: cbdash\r\n\r\n") // may fail: the server has closed it
		if got, _ := waitClosed(t, c, c); got != "" {
			t.Fatalf("connection %d over the cap of one address was answered: %q", perAddress+i+1, got)
		}
	}

	// Meanwhile another client is served at once.
	start := time.Now()
	res, err := clientFrom("127.0.0.2").Get(ls.srv.URL() + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz from 127.0.0.2 while 127.0.0.3 holds its cap: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz from 127.0.0.2 = %d", res.StatusCode)
	}
	t.Logf("GET /healthz from another address answered in %v", time.Since(start))

	// The idle ones are closed after the idle timeout (with no answer to
	// anything: they sent nothing more).
	for i, h := range idleConns {
		got, took := waitClosed(t, h.c, h.br)
		if got != "" {
			t.Errorf("idle connection %d read %q before it was closed", i+1, got)
		}
		if i == 0 {
			t.Logf("the first idle connection was closed %v after its answer was read (--idle-timeout %v)", took, idle)
		}
	}
	// Their slots are free again.
	eventually.True(t, "GET /healthz from 127.0.0.3 once its connections are closed", func() bool {
		res, err := clientFrom("127.0.0.3").Get(ls.srv.URL() + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	metrics := ls.call(http.MethodGet, "/metrics", "", nil).body
	for _, want := range []string{`cbdash_connections_refused_total{limit="address"} 6`, "cbdash_connections_open "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestSecuritySlowlorisIsCutAtTheHeaderTimeout(t *testing.T) {
	const headerTimeout = time.Second
	ls := startServer(t, func(o *serveOptions) {
		o.Conn = connOptions{ReadHeaderTimeout: headerTimeout, ReadTimeout: 2 * time.Second}
	}, nil)
	start := time.Now()
	c, err := dialFrom(t, "127.0.0.2", ls.srv.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// A header that never ends, a byte every 50 ms: each byte is
	// progress, which must not extend the deadline.
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: cbdash\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	closed := make(chan string, 1)
	go func() { got, _ := waitClosed(t, c, c); closed <- got }()
	drip := time.NewTicker(50 * time.Millisecond)
	defer drip.Stop()
	sent := 0
	for {
		select {
		case got := <-closed:
			took := time.Since(start)
			t.Logf("the slow header was cut after %v and %d bytes dripped (--read-header-timeout %v)", took, sent, headerTimeout)
			if got != "" {
				t.Errorf("the slow client was answered %q", got)
			}
			if took < headerTimeout {
				t.Errorf("cut after %v, before --read-header-timeout %v", took, headerTimeout)
			}
			return
		case <-drip.C:
			if _, err := c.Write([]byte("a")); err == nil {
				sent++
			}
		}
	}
}

// startTLSServer is startServer over HTTPS (a self-signed certificate)
// with the connection options o: startServer's readiness check does not
// take the certificate.
func startTLSServer(t *testing.T, o connOptions) *liveServer {
	t.Helper()
	var so serveOptions
	so.Addr, so.DB = "127.0.0.1:0", filepath.Join(t.TempDir(), "cbdash.db")
	so.LogLevel, so.LogFormat, so.AdminPassword = "info", "text", "admin-password"
	so.TLSCert, so.TLSKey = selfSigned(t, t.TempDir())
	so.Conn = o
	ls := &liveServer{t: t, clk: clocktest.Virtual(), logs: &logBuffer{}, tokens: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, so, slog.New(slog.NewTextHandler(ls.logs, nil)), ls.clk)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ls.srv = srv
	hash, _ := web.HashPassword("password-vera")
	u, err := srv.store.CreateUser(ctx, "vera", cbdash.RoleViewer, hash)
	if err == nil {
		ls.tokens["vera"], err = srv.store.CreateUserToken(ctx, u.ID, "cli")
	}
	if err == nil {
		ls.agent, err = srv.store.CreateAgentToken(ctx, "")
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	eventually.True(t, "GET /readyz over TLS: 200", func() bool {
		res, err := client.Get(srv.URL() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return ls
}

// TestSecurityStreamsLivePastTheRequestTimeouts: agent and dashboard
// websockets and the event stream outlive --read-timeout and
// --write-timeout, which bound plain requests: they have their own
// liveness. Over HTTPS the event stream is HTTP/2, where a write deadline
// that passes resets the stream even when nothing is being written:
// before, the stream there ended at --write-timeout (and 10 s after any
// event with no other behind it).
func TestSecurityStreamsLivePastTheRequestTimeouts(t *testing.T) {
	t.Run("http", func(t *testing.T) { streamsLivePastTheTimeouts(t, false) })
	t.Run("https, the event stream over HTTP/2", func(t *testing.T) { streamsLivePastTheTimeouts(t, true) })
}

func streamsLivePastTheTimeouts(t *testing.T, overTLS bool) {
	const timeout = 500 * time.Millisecond
	o := connOptions{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: timeout}
	var ls *liveServer
	if overTLS {
		ls = startTLSServer(t, o)
	} else {
		ls = startServer(t, func(so *serveOptions) { so.Conn = o }, nil)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base := ls.srv.URL()
	ws := "ws" + strings.TrimPrefix(base, "http")
	insecure := &tls.Config{InsecureSkipVerify: true}
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure, ForceAttemptHTTP2: true}}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure}} // websockets upgrade HTTP/1.1
	defer h2.CloseIdleConnections()

	// The event stream, up to its header (over HTTPS with no snapshot:
	// nothing is written after the header, the write deadline is the
	// server's).
	path := "/api/v1/events?kind=transition"
	if !overTLS {
		path += "&snapshot=1"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+ls.tokens["vera"])
	res, err := h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if overTLS && res.ProtoMajor != 2 {
		t.Fatalf("the event stream over HTTPS is %s, want HTTP/2", res.Proto)
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if kind, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- kind
			}
		}
	}()
	if !overTLS {
		if kind := <-events; kind != "snapshot" {
			t.Fatalf("first event %q, want snapshot", kind)
		}
	}

	// An agent, up to its welcome.
	agent, _, err := websocket.Dial(ctx, ws+"/api/v1/agent", &websocket.DialOptions{HTTPClient: h1,
		Subprotocols: []string{protocol.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + ls.agent}}})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.CloseNow()
	now := ls.clk.Now()
	cfg := protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50,
		MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1}
	send := func(v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if err := agent.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("agent write: %v", err)
		}
	}
	expect := func(typ string) {
		t.Helper()
		_, b, err := agent.Read(ctx)
		if err != nil || !strings.Contains(string(b), `"type":"`+typ+`"`) {
			t.Fatalf("agent read: %s %v, want a %s", b, err, typ)
		}
	}
	send(protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: "checkout-1",
		SDKVersion: "test", StartedAt: now.Add(-time.Hour).UnixMilli(), Breakers: []protocol.BreakerConfig{cfg}})
	expect(protocol.TypeWelcome)

	// A dashboard's live socket, up to its first message; its reader
	// goroutine reads on (pings need one).
	live, _, err := websocket.Dial(ctx, ws+"/live?view=overview", &websocket.DialOptions{HTTPClient: h1,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + ls.tokens["vera"]}}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.CloseNow()
	if _, _, err := live.Read(ctx); err != nil {
		t.Fatalf("first live message: %v", err)
	}
	go func() {
		for {
			if _, _, err := live.Read(ctx); err != nil {
				return
			}
		}
	}()

	// Proof that the timeouts have passed for all three: a connection
	// opened after them that sends nothing is cut at
	// --read-header-timeout (over TLS, at the handshake's timeout, the
	// shortest of the three), which is --read-timeout and --write-timeout.
	sentinel, err := dialFrom(t, "127.0.0.2", ls.srv.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, took := waitClosed(t, sentinel, sentinel)
	t.Logf("the connection that sent nothing was closed after %v", took)

	// All three still carry data both ways.
	send(protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(),
		Transitions: []protocol.Transition{{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen,
			At: now.Add(-500 * time.Millisecond).UnixMilli(), OpenMillis: 5000,
			Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50, WindowCalls: 20, WindowFailed: 11}}}})
	expect(protocol.TypeAck)
	select {
	case kind, ok := <-events:
		if !ok || kind != "transition" {
			t.Errorf("the event stream after the timeouts: %q (open: %v), want a transition", kind, ok)
		}
	case <-ctx.Done():
		t.Error("no transition on the event stream after the timeouts")
	}
	if err := live.Ping(ctx); err != nil {
		t.Errorf("ping on the live socket after the timeouts: %v", err)
	}
}
