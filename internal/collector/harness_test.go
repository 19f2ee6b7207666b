package collector

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
)

// harness is a collector on a real SQLite file behind a real HTTP server on
// 127.0.0.1, store and collector on one clock. (The collector's own tests
// cannot use stacktest, which imports this package.)
type harness struct {
	t      testing.TB
	clk    clock.Clock
	path   string
	store  *store.Store
	col    *Collector
	srv    *httptest.Server
	token  string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	halted chan struct{} // closed when stop has finished
}

// testMux serves the collector's own handlers as internal/web mounts
// them (the agent websocket, HTTP ingest, the event stream, metrics and
// readiness), with the web error handler's mapping of sentinels to
// statuses and JSON bodies. (The collector's tests cannot import web,
// which imports this package.)
func testMux(col *Collector) http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				writeTestError(w, err)
			}
		})
	}
	handle("GET /api/v1/agent", col.ServeAgent)
	handle("POST /api/v1/ingest", col.ServeIngest)
	handle("GET /api/v1/events", col.ServeEvents)
	handle("GET /metrics", col.ServeMetrics)
	handle("GET /readyz", func(w http.ResponseWriter, r *http.Request) error {
		status, cause := col.Readiness(r.Context())
		code := http.StatusOK
		body := map[string]string{"status": status}
		if status != "ready" {
			code = http.StatusServiceUnavailable
			if cause != nil {
				body["error"] = cause.Error()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		return json.NewEncoder(w).Encode(body)
	})
	return mux
}

func writeTestError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	for _, m := range []struct {
		err    error
		status int
	}{
		{cbdash.ErrInvalid, http.StatusBadRequest}, {cbdash.ErrUnauthorized, http.StatusUnauthorized},
		{cbdash.ErrForbidden, http.StatusForbidden}, {cbdash.ErrNotFound, http.StatusNotFound},
		{cbdash.ErrConflict, http.StatusConflict}, {cbdash.ErrUnavailable, http.StatusServiceUnavailable},
	} {
		if errors.Is(err, m.err) {
			status = m.status
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// startHarness opens (or reopens) the database at path and starts a
// collector on it; path "" means a new database in t.TempDir(). The clock
// is a running one from the test epoch unless mod sets Config.Clock (a
// restart passes the clock of the harness it replaces).
func startHarness(t testing.TB, path string, mod func(*Config)) *harness {
	t.Helper()
	return startHarnessOn(t, path, "127.0.0.1:0", mod)
}

// startHarnessOn is startHarness listening on addr (to restart a collector
// where its agents expect it).
func startHarnessOn(t testing.TB, path, addr string, mod func(*Config)) *harness {
	t.Helper()
	if path == "" {
		path = storetest.Path(t)
	}
	ctx := context.Background()
	cfg := Config{Clock: clocktest.NewRunning(), Registerer: prometheus.NewRegistry(), PublishInterval: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	st := storetest.OpenFile(t, path, store.Options{Clock: cfg.Clock})
	cfg.Store = st
	col, err := New(cfg)
	if err != nil {
		t.Fatalf("new collector: %v", err)
	}
	token, err := st.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := httptest.NewUnstartedServer(testMux(col))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	h := &harness{t: t, clk: cfg.Clock, path: path, store: st, col: col, srv: srv, token: token, done: make(chan error, 1), halted: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	go func() { h.done <- col.Run(rctx) }()
	eventually.True(t, "collector ready", col.ing.Accepting)
	t.Cleanup(h.stop)
	return h
}

// stop stops the collector, the server and the store; it is idempotent
// and safe to call from several goroutines (each returns once stopped).
func (h *harness) stop() {
	h.once.Do(func() {
		defer close(h.halted)
		h.cancel()
		if err := <-h.done; err != nil {
			h.t.Errorf("run: %v", err)
		}
		h.srv.Close()
		if err := h.store.Close(); err != nil {
			h.t.Errorf("close store: %v", err)
		}
	})
	<-h.halted
}

func (h *harness) wsURL() string {
	return "ws" + strings.TrimPrefix(h.srv.URL, "http") + "/api/v1/agent"
}

// now is the time on the harness's clock.
func (h *harness) now() time.Time { return h.clk.Now() }

// restartOpts is the mod of a harness restarted after h: the same clock.
func (h *harness) restartOpts(c *Config) { c.Clock = h.clk }

// rawAgent speaks the protocol directly, to test the collector's answers
// to well-formed and malformed messages.
type rawAgent struct {
	t    testing.TB
	conn *websocket.Conn
}

func dialRaw(t testing.TB, h *harness, token string) *rawAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, h.wsURL(), &websocket.DialOptions{
		Subprotocols: []string{protocol.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(protocol.MaxMessageBytes)
	a := &rawAgent{t: t, conn: conn}
	t.Cleanup(func() { conn.CloseNow() })
	return a
}

func (a *rawAgent) sendRaw(data []byte) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.conn.Write(ctx, websocket.MessageText, data); err != nil {
		a.t.Fatalf("write: %v", err)
	}
}

func (a *rawAgent) send(v any) {
	a.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		a.t.Fatal(err)
	}
	a.sendRaw(data)
}

// next reads the next message; it returns its type and raw JSON, or the
// read error.
func (a *rawAgent) next() (string, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := a.conn.Read(ctx)
	if err != nil {
		return "", nil, err
	}
	var env protocol.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		a.t.Fatalf("collector sent non-JSON %q", data)
	}
	return env.Type, data, nil
}

// expect reads the next message, which must be of type typ, into v.
func (a *rawAgent) expect(typ string, v any) {
	a.t.Helper()
	got, data, err := a.next()
	if err != nil {
		a.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if got != typ {
		a.t.Fatalf("got %s %s, want %s", got, data, typ)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			a.t.Fatal(err)
		}
	}
}

// hello sends a hello for one instance of service "api" with breakers
// "db" and "cache" and returns the welcome.
func (a *rawAgent) hello(instance string, startedAt int64) protocol.Welcome {
	a.t.Helper()
	a.send(rawHello(instance, startedAt))
	var w protocol.Welcome
	a.expect(protocol.TypeWelcome, &w)
	return w
}

func rawHello(instance string, startedAt int64) protocol.Hello {
	return protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version, Service: "api", Instance: instance,
		SDKVersion: "test", StartedAt: startedAt, Labels: map[string]string{"region": "eu"},
		Breakers: []protocol.BreakerConfig{
			{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1},
			{Name: "cache", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1},
		},
	}
}

// batch builds a batch sent now, with one window report for "db" ending
// now (admitted calls, failures among them) and the given transitions.
func (h *harness) batch(seq uint64, admitted, failures int64, ts ...protocol.Transition) protocol.Batch {
	return batchAt(h.now(), seq, admitted, failures, ts...)
}

func batchAt(at time.Time, seq uint64, admitted, failures int64, ts ...protocol.Transition) protocol.Batch {
	now := at.UnixMilli()
	state := protocol.StateClosed
	if len(ts) > 0 {
		state = ts[len(ts)-1].To
	}
	return protocol.Batch{
		Type: protocol.TypeBatch, Seq: seq, SentAt: now, Transitions: ts,
		Windows: []protocol.Window{{
			Breaker: "db", Start: now - 1000, Millis: 1000, State: state,
			Counts: protocol.Counts{Admitted: admitted, Successes: admitted - failures, Failures: failures, Errors: failures},
		}},
	}
}

// trans is a transition of "db" now, caused by the failure rate.
func (h *harness) trans(from, to string, gen uint64) protocol.Transition {
	return transAt(h.now(), from, to, gen)
}

func transAt(at time.Time, from, to string, gen uint64) protocol.Transition {
	return protocol.Transition{
		Breaker: "db", From: from, To: to, At: at.UnixMilli(), Generation: gen,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50},
	}
}
