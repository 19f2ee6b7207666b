// Package stacktest runs the server's stack for a test, as cmd/cbdash
// wires it: a real store in the test's temporary directory, the real
// collector (running), and the dashboard, mounted on one echo and served
// over HTTP on 127.0.0.1 by httptest, every part on the one clock the
// test gives. Agents (sdk/agent, or raw websockets) connect to AgentURL
// with AgentToken; browsers and HTTP clients use URL.
//
// A Stack is stopped when the test ends: the dashboard's live sockets,
// the collector (agent sessions and event streams end), the HTTP server,
// the store.
package stacktest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/internal/web"
)

// Options shape a Stack. The zero value works: a new database, a running
// clock at the test epoch, a random port.
type Options struct {
	// Clock is the clock of the store, the collector and the dashboard;
	// nil = clocktest.NewRunning(). With a virtual clock
	// (clocktest.Virtual) the collector publishes, sweeps and compacts
	// only when the test advances it.
	Clock clock.Clock
	// Path is the database file; "" = a new file in the test's temporary
	// directory. The Path of a stopped Stack restarts on its history.
	Path string
	// Addr is where to listen; "" = 127.0.0.1 on a random port. The Addr
	// of a stopped Stack restarts where its agents expect it.
	Addr string
	// Collector, when set, adjusts the collector's config before New
	// (Store and Clock are set; PublishInterval is 50 ms unless changed
	// here; Registerer is a private registry).
	Collector func(*collector.Config)
	// Web, when set, adjusts the dashboard's config before New (every
	// service is set as cmd/cbdash sets it, Alerts when Alert is set, and
	// Clock); setting a service nil turns its feature off.
	Web func(*web.Config)
	// Alert, when set, runs an alert service, as cmd/cbdash does: it
	// adjusts its config before New (Source, Store and Clock are set;
	// Interval is 1 s of the clock unless changed here), and the service
	// serves the alerts API and the dashboard's alerts page. Nil = no alert
	// service (a test that runs its own).
	Alert func(*alert.Config)
}

// Stack is a running server stack. Its fields are read-only.
type Stack struct {
	Clock      clock.Clock
	Path       string // the database file
	Addr       string // host:port the HTTP server listens on
	Store      *store.Store
	Collector  *collector.Collector
	Web        *web.Server
	Alerts     *alert.Service // nil unless Options.Alert was set
	Server     *httptest.Server
	AgentToken string // an agent token for any service

	tb           testing.TB
	cancelAlerts context.CancelFunc
	stopAlerts   chan error
	cancel       context.CancelFunc
	done         chan error
	once         sync.Once
}

// Start starts a Stack and returns once the collector is ready (agents
// are accepted). It fails tb if any part does not start.
func Start(tb testing.TB, o Options) *Stack {
	tb.Helper()
	if o.Clock == nil {
		o.Clock = clocktest.NewRunning()
	}
	if o.Path == "" {
		o.Path = storetest.Path(tb)
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	s := &Stack{tb: tb, Clock: o.Clock, Path: o.Path, done: make(chan error, 1)}
	s.Store = storetest.OpenFile(tb, o.Path, store.Options{Clock: o.Clock})
	ccfg := collector.Config{Store: s.Store, Clock: o.Clock, PublishInterval: 50 * time.Millisecond}
	if o.Collector != nil {
		o.Collector(&ccfg)
	}
	var err error
	if s.Collector, err = collector.New(ccfg); err != nil {
		tb.Fatalf("stacktest: collector: %v", err)
	}
	if o.Alert != nil {
		acfg := alert.Config{Source: s.Collector, Members: s.Collector, Store: s.Store, Clock: o.Clock, Interval: time.Second}
		o.Alert(&acfg)
		if s.Alerts, err = alert.New(acfg); err != nil {
			tb.Fatalf("stacktest: alert: %v", err)
		}
	}
	// Every service of the dashboard, as cmd/cbdash wires them.
	wcfg := web.Config{
		Collector: s.Collector, History: s.Store, Sessions: s.Store, Accounts: s.Store,
		Holds: s.Collector, Schedules: s.Collector, Incidents: s.Store, InstanceHistory: s.Store, FleetHistory: s.Store,
		AgentSessions: s.Collector, ShadowHistory: s.Store, Clock: o.Clock,
	}
	if s.Alerts != nil {
		wcfg.Alerts = s.Alerts
	}
	if o.Web != nil {
		o.Web(&wcfg)
	}
	if s.Web, err = web.New(wcfg); err != nil {
		tb.Fatalf("stacktest: web: %v", err)
	}
	if s.AgentToken, err = s.Store.CreateAgentToken(context.Background(), ""); err != nil {
		tb.Fatalf("stacktest: agent token: %v", err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = web.HTTPErrorHandler
	s.Web.Mount(e) // every route: pages, the JSON API, the agents' transports
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		tb.Fatalf("stacktest: listen on %s: %v", o.Addr, err)
	}
	s.Addr = ln.Addr().String()
	s.Server = httptest.NewUnstartedServer(e)
	s.Server.Listener.Close()
	s.Server.Listener = ln
	s.Server.Start()

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- s.Collector.Run(ctx) }()
	if s.Alerts != nil {
		actx, acancel := context.WithCancel(ctx)
		s.stopAlerts = make(chan error, 1)
		s.cancelAlerts = acancel
		go func() { s.stopAlerts <- s.Alerts.Run(actx) }()
	}
	tb.Cleanup(s.Stop)
	eventually.True(tb, "the collector ready (GET /readyz 200)", s.ready)
	return s
}

func (s *Stack) ready() bool {
	resp, err := s.Server.Client().Get(s.URL() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// URL is the server's base URL, "http://127.0.0.1:PORT".
func (s *Stack) URL() string { return s.Server.URL }

// AgentURL is the websocket URL agents connect to.
func (s *Stack) AgentURL() string {
	return "ws" + strings.TrimPrefix(s.Server.URL, "http") + "/api/v1/agent"
}

// Stop stops the stack: the dashboard's live sockets, the collector (its
// error fails the test; agent sessions and event streams end), the HTTP
// server, then the store. It is
// idempotent and runs by itself when the test ends; a test calls it to
// restart a Stack on the same Path and Addr.
func (s *Stack) Stop() {
	s.once.Do(func() {
		_ = s.Web.Close()
		if s.cancelAlerts != nil {
			s.cancelAlerts()
			if err := <-s.stopAlerts; err != nil {
				s.tb.Errorf("stacktest: alert run: %v", err)
			}
		}
		s.cancel()
		if err := <-s.done; err != nil {
			s.tb.Errorf("stacktest: collector run: %v", err)
		}
		s.Server.Close()
		if err := s.Store.Close(); err != nil {
			s.tb.Errorf("stacktest: close store: %v", err)
		}
	})
}
