package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
)

// ServerConfig configures a dependency server. The zero value (but for
// Name) works.
type ServerConfig struct {
	// Name is the dependency's name ("payments"); required.
	Name string
	// Script is the fault script it follows (zero = DefaultScript()).
	Script Script
	// Offset is where in the script the server starts: at start it
	// behaves as the script does Offset after its beginning.
	Offset time.Duration
	// Clock is the clock the script is read with (nil = clock.System()).
	// Latency is always real time: it is what the clients feel.
	Clock clock.Clock
	// Logger receives errors (nil = discard).
	Logger *slog.Logger
}

// Server is a real HTTP dependency server on 127.0.0.1 (random port) that
// answers every request as its fault script says at that moment. It is
// safe for concurrent use.
type Server struct {
	name   string
	script Script
	offset time.Duration
	now    func() time.Time
	start  time.Time
	log    *slog.Logger

	calls  atomic.Uint64
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// StartServer validates cfg, listens on a random loopback port and serves
// until Close.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("demo: ServerConfig.Name is required")
	}
	if cfg.Script.Phases == nil {
		cfg.Script = DefaultScript()
	}
	if err := cfg.Script.Validate(); err != nil {
		return nil, fmt.Errorf("demo: ServerConfig.Script: %w", err)
	}
	cfg.Clock = clock.OrSystem(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen for %s: %w", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		name: cfg.Name, script: cfg.Script, offset: cfg.Offset, now: cfg.Clock.Now,
		start: cfg.Clock.Now(), log: cfg.Logger.With("dependency", cfg.Name),
		cancel: cancel, done: make(chan struct{}),
	}
	s.ln = &resetListener{Listener: ln, down: func() bool { _, _, f := s.Fault(); return f.Down }}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("dependency server stopped", "err", err)
		}
	}()
	return s, nil
}

// Name is the dependency's name.
func (s *Server) Name() string { return s.name }

// URL is the server's base URL, "http://127.0.0.1:PORT".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Fault returns the script's phase in force now and the fault applied.
func (s *Server) Fault() (index int, phase Phase, fault Fault) {
	return s.script.At(s.now().Sub(s.start) + s.offset)
}

// Close stops the server: waiting requests are cut short, and Close
// returns once the serving goroutine has ended or ctx is done.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.srv.Shutdown(ctx)
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Answer is the JSON body of every answer that has one.
type Answer struct {
	Dependency string `json:"dependency"`
	Phase      string `json:"phase"`
	Status     int    `json:"status"`
	Call       uint64 `json:"call"`
}

// ServeHTTP answers as the fault in force says. Headers X-Demo-Phase and
// X-Demo-Latency-Ms tell what was applied.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, phase, f := s.Fault()
	if f.Down {
		reset(w)
		return
	}
	w.Header().Set("X-Demo-Phase", phase.Name)
	n := s.calls.Add(1)
	if f.Unavailable {
		w.Header().Set("Retry-After", "1")
		s.write(w, phase, http.StatusServiceUnavailable, n)
		return
	}
	if f.Latency > 0 {
		w.Header().Set("X-Demo-Latency-Ms", strconv.FormatInt(f.Latency.Milliseconds(), 10))
		t := time.NewTimer(f.Latency) // real time, see ServerConfig.Clock
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	s.write(w, phase, statusFor(f, n), n)
}

func (s *Server) write(w http.ResponseWriter, phase Phase, status int, n uint64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Answer{Dependency: s.name, Phase: phase.Name, Status: status, Call: n})
}

// statusFor picks the status of call number n. A Weyl sequence (n times
// the golden ratio, modulo 1) is equidistributed, so the rates hold over
// any stretch of calls, deterministically.
func statusFor(f Fault, n uint64) int {
	_, u := math.Modf(float64(n) * 0.6180339887498949)
	switch {
	case u < f.ErrorRate:
		if f.ErrorStatus != 0 {
			return f.ErrorStatus
		}
		return http.StatusInternalServerError
	case u < f.ErrorRate+f.BusinessRate:
		if n%2 == 0 {
			return http.StatusNotFound
		}
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// reset drops the connection without an answer (RST), as a dead backend.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// resetListener resets new connections while the server is down, so new
// clients see "connection reset" at once.
type resetListener struct {
	net.Listener
	down func() bool
}

func (l *resetListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.down() {
			return c, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}
