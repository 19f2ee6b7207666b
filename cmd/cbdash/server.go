package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/otelexport"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
)

// shutdownTimeout bounds each step of a graceful shutdown.
const shutdownTimeout = 10 * time.Second

// server is the collector and the dashboard, wired together on one
// listener, with the store under both.
type server struct {
	log       *slog.Logger
	store     *store.Store
	col       *collector.Collector
	incidents *incident.Service
	alerts    *alert.Service
	sources   *source.Sources
	web       *web.Server
	http      *http.Server
	ln        net.Listener
	tls       bool
	otlp      *otelexport.Exporter // nil without --otlp-endpoint
	bus       cluster.Bus          // Local for SQLite; the collectors' bus on PostgreSQL
	dbLock    *dbLock              // SQLite: this server's claim on its file (nil on PostgreSQL)
	clk       clock.Clock
	// adminPassword is the first account's generated password when this
	// start created it (and no --admin-password was given), else "".
	adminPassword string
}

// openServer opens the store, builds the collector and the dashboard, and
// listens on o.Addr. Nothing is served until run. clk is the one clock of
// the store, the collector, the incident and alert services and the
// dashboard. On error, whatever was opened is closed.
func openServer(ctx context.Context, o serveOptions, log *slog.Logger, clk clock.Clock) (_ *server, err error) {
	s := &server{log: log, tls: o.TLSCert != "", clk: clk}
	defer func() {
		if err != nil {
			s.closeStore()
		}
	}()
	if !store.IsPostgres(o.DB) && o.DB != ":memory:" && !strings.HasPrefix(o.DB, "file:") { // a file: URI names its file its own way
		if s.dbLock, err = lockDB(o.DB, o.Addr, clk.Now()); err != nil {
			return nil, err
		}
	}
	s.store, err = store.Open(ctx, o.DB, store.Options{
		Logger: log.With("component", "store"), Clock: clk,
		Retention: store.Retention{
			Seconds: o.Retention.PerSecond, Minutes: o.Retention.PerMinute,
			Hours: o.Retention.PerHour, Transitions: o.Retention.Transitions,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("opening the database %s (flag --db or CBDASH_DB): %w", store.MaskDSN(o.DB), err)
	}
	if s.bus, err = openBus(ctx, o.DB, log, clk); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	// The process's own CPU, memory and runtime figures (what cbdash
	// loadgen measures the server by).
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	s.col, err = collector.New(collector.Config{
		Store: s.store, Logger: log.With("component", "collector"),
		Registerer: reg, MetricsToken: o.MetricsToken, MaxHold: o.MaxHold, AckDelay: o.AckDelay, Clock: clk,
		Limits: o.Limits, Cluster: s.bus, DefaultStops: o.defaultStops(), Quorum: o.quorumRules(), NoProbeRotation: !o.QuorumProbes,
		CollectorID: collectorID(o.Addr),
	})
	if err != nil {
		return nil, err
	}
	if len(o.QuorumRules) > 0 {
		log.Info("quorum-advised trips", "on", o.Quorum, "rules", o.QuorumRules) // off: the kill switch is down
	}
	incidentLog := log.With("component", "incident")
	if o.quietIncidents {
		incidentLog = slog.New(floorHandler{incidentLog.Handler(), slog.LevelWarn})
	}
	s.incidents, err = incident.NewService(incident.ServiceConfig{
		Source: s.col, Store: s.store, Logger: incidentLog, Clock: clk, Detector: incident.Config{Quiet: o.IncidentQuiet, Share: o.IncidentShare, IncludeForced: o.IncidentForced},
	})
	if err != nil {
		return nil, err
	}
	s.alerts, err = alert.New(alert.Config{Source: s.col, Members: s.col, Store: s.store, Logger: log.With("component", "alert"), Clock: clk,
		ExternalURL: o.ExternalURL, Delivery: alert.DeliveryConfig{AllowPrivate: o.AllowPrivateWebhooks}})
	if err != nil {
		return nil, err
	}
	s.sources, err = source.New(source.Config{Sink: s.col, Targets: o.targets, Clock: clk, Logger: log.With("component", "source"), Registerer: reg})
	if err != nil {
		return nil, err
	}
	for _, t := range o.targets {
		log.Info("reading a source", "kind", t.Kind, "url", t.URL, "service", t.Service, "instance", t.Instance)
	}
	proxies, err := o.trustedProxies()
	if err != nil {
		return nil, err
	}
	s.web, err = web.New(web.Config{
		// Every service of the dashboard, one typed field each (a nil one
		// would turn its feature off).
		Collector: s.col, History: s.store, Sessions: s.store, Accounts: s.store,
		Holds: s.col, Schedules: s.col, Incidents: s.store, InstanceHistory: s.store, FleetHistory: s.store,
		AgentSessions: s.col, Alerts: s.alerts, ShadowHistory: s.store,
		Logger:    log.With("component", "web"),
		Anonymous: o.Anonymous, Secure: s.tls || o.SecureCookies,
		TrustedProxies: proxies, Registerer: reg, Clock: clk, Live: o.Live, Events: o.Events, Reads: o.Reads,
	})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = web.HTTPErrorHandler
	s.web.Mount(e) // every route: pages, the JSON API, the agents' transports

	s.http = o.Conn.httpServer(e, log) // the timeouts of plain requests
	if s.tls {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", o.TLSCert, o.TLSKey, err)
		}
		s.http.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s (flag --addr or CBDASH_ADDR): %w", o.Addr, err)
	}
	// The connection caps, at accept: under TLS, under everything.
	if s.ln, err = o.Conn.listen(ln, proxies, reg, log.With("component", "http"), clk); err != nil {
		ln.Close()
		return nil, err
	}
	if s.otlp, err = o.OTLP.start(ctx, reg, s.col.CollectorID(), log.With("component", "otlp")); err != nil {
		s.ln.Close()
		return nil, err
	}
	// Only once the server can start: a first start that fails must not
	// make the admin account and spend its one-time password.
	created, pw, err := web.EnsureAdmin(ctx, s.store, o.AdminPassword)
	if err != nil {
		s.ln.Close()
		s.stopExport(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("creating the admin account: %w", err)
	}
	switch {
	case created && o.AdminPassword != "": // the operator knows it: never write it to a log
		log.Info("created the first account with the password of --admin-password", "user", web.AdminName)
	case created && o.bannerShowsAdmin: // the demo's banner shows it: no second copy, in a log
		log.Info("created the first account with a generated password, shown in the banner", "user", web.AdminName)
		s.adminPassword = pw
	case created:
		log.Warn("created the first account; it is not shown again (cbdash user passwd admin sets a new one)",
			"user", web.AdminName, "password", pw)
		s.adminPassword = pw
	}
	return s, nil
}

// URL is the server's base URL, from the address it actually listens on.
func (s *server) URL() string {
	scheme := "http"
	if s.tls {
		scheme = "https"
	}
	return scheme + "://" + s.ln.Addr().String()
}

// AgentURL is the websocket URL agents connect to.
func (s *server) AgentURL() string {
	scheme := "ws"
	if s.tls {
		scheme = "wss"
	}
	return scheme + "://" + s.ln.Addr().String() + "/api/v1/agent"
}

// run serves until ctx is done (or the listener or a background loop
// fails), then shuts down in reverse order of dependence: beforeStop (the
// demo stops its fleet there, so that its agents flush while everything
// still serves), the dashboard's live sockets, the HTTP server (no new
// requests; ingest requests in progress finish), the incident and alert
// services and the pull sources, the collector (agent sessions closed, batches in progress
// stored), and last the store (its writer drained, the database closed).
func (s *server) run(ctx context.Context, beforeStop func(context.Context)) error {
	errc := make(chan error, 8)
	// The collector's loops outlive the services that feed on it.
	colCtx, stopCol := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCol()
	var colWG sync.WaitGroup
	colWG.Add(1)
	go func() {
		defer colWG.Done()
		if err := s.col.Run(colCtx); err != nil {
			errc <- fmt.Errorf("collector: %w", err)
		}
	}()
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	var svcWG sync.WaitGroup
	// The sources feed the collector: they stop with the services, before it.
	loops := map[string]func(context.Context) error{
		"incidents": s.lead("incidents", s.incidents.Run), "alerts": s.lead("alerts", s.alertsWithRules), "sources": s.sources.Run,
	}
	for name, loop := range loops {
		svcWG.Add(1)
		go func() {
			defer svcWG.Done()
			if err := loop(svcCtx); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	var httpWG sync.WaitGroup
	httpWG.Add(1)
	go func() {
		defer httpWG.Done()
		var err error
		if s.tls {
			err = s.http.ServeTLS(s.ln, "", "")
		} else {
			err = s.http.Serve(s.ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
	case runErr = <-errc:
		s.log.Error("stopping", "err", runErr)
	}
	if beforeStop != nil {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		beforeStop(bctx)
		cancel()
	}
	_ = s.web.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.log.Warn("http shutdown", "err", err)
	}
	httpWG.Wait()
	stopSvc()
	svcWG.Wait()
	stopCol()
	colWG.Wait()
	s.stopExport(sctx) // a last export of the final figures
	if err := s.closeStore(); err != nil {
		return errors.Join(runErr, fmt.Errorf("closing the database: %w", err))
	}
	s.log.Info("stopped")
	return runErr
}

// stopExport makes the OTLP export's last export and stops it.
func (s *server) stopExport(ctx context.Context) {
	if s.otlp == nil {
		return
	}
	if err := s.otlp.Shutdown(ctx); err != nil {
		s.log.Warn("the last OTLP export failed", "err", err)
	}
	s.otlp = nil
}

// closeStore closes the bus and the store once, then gives up the SQLite
// file's lock (no-op when they were never opened).
func (s *server) closeStore() error {
	if s.bus != nil {
		_ = s.bus.Close()
		s.bus = nil
	}
	defer func() { s.dbLock.release(); s.dbLock = nil }() // after the store's last write
	if s.store == nil {
		return nil
	}
	st := s.store
	s.store = nil
	return st.Close()
}
