// Package web is every HTTP route of cbdash: the dashboard's
// server-rendered pages (overview, dependency, timeline, audit log, admin),
// the live websocket that pushes rendered fragments, the JSON API under
// /api/v1 with its OpenAPI document (openapi.json), the agents' transports
// and the health, readiness and metrics endpoints; accounts with roles,
// sessions, user API tokens, CSRF protection, body limits and security
// headers applied by route group; and the one HTTP error handler of the
// server. It is the only package that imports the HTTP framework.
//
// It depends on the collector and the store only through the small
// interfaces declared here, one per service, each a typed field of
// Config (Collector, History, Sessions, Accounts, and the optional
// Holds, Incidents, Alerts, InstanceHistory, FleetHistory and
// AgentSessions), so it renders whatever implements them and a wiring
// mistake is a compile error or New's. Templates live in web/templates, assets in web/static.
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/tune"
)

// Collector is what the dashboard needs from the live state: a snapshot
// of every dependency (worst first), one dependency, a subscription to
// changes that shares the collector's views, and issuing operator
// commands. *collector.Collector implements it; its methods must be safe
// for concurrent use.
type Collector interface {
	Dependencies() []cbdash.Dependency
	// DependenciesWithMembers is Dependencies with every member of each
	// in PerInstance, those another collector serves included (from the
	// store): Dependencies' lines are this collector's members only.
	DependenciesWithMembers() []cbdash.Dependency
	// Dependency returns an error wrapping cbdash.ErrNotFound for an
	// unknown key; its PerInstance lists every member, as
	// DependenciesWithMembers'.
	Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error)
	// SubscribeViews returns the current snapshot and a channel of later
	// events; the channel is closed when the subscriber is too slow or
	// cancel is called. The snapshot's dependencies are the collector's
	// own views, shared and read-only: the live overviews' fleetIndex
	// keeps every dependency, a pointer each, instead of a copy.
	SubscribeViews() (snapshot []*cbdash.Dependency, events <-chan cbdash.Event, cancel func())
	// Issue records and sends an operator command by actor (who goes
	// into the audit log).
	Issue(ctx context.Context, actor cbdash.Actor, r cbdash.CommandRequest) (cbdash.Command, error)
	API
}

// History is what the pages read of the stored history: points, the
// transitions and commands of the timeline, the dependency page and the
// audit log, the gaps drawn on charts (time whose reports an agent
// dropped under memory pressure) and when the first instance was heard
// of (the timeline's "no data" band). *store.Store implements it.
type History interface {
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
	Transitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error)
	Commands(ctx context.Context, q cbdash.CommandQuery) ([]cbdash.Command, error)
	// Command returns one command; cbdash.ErrNotFound for an unknown id.
	Command(ctx context.Context, id string) (cbdash.Command, error)
	Gaps(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Gap, error)
	// FirstSeen is when the first instance was heard of; zero when none
	// was.
	FirstSeen(ctx context.Context) (time.Time, error)
}

// Sessions is what logging in, logging out and recognizing a caller need:
// users by name, login sessions and user API tokens. Secrets are stored
// hashed; lookups of unknown or expired secrets return errors wrapping
// cbdash.ErrUnauthorized, unknown users cbdash.ErrNotFound.
// *store.Store implements it.
type Sessions interface {
	UserByName(ctx context.Context, name string) (cbdash.User, []byte, error)
	CreateSession(ctx context.Context, userID int64, expires time.Time) (token string, err error)
	SessionUser(ctx context.Context, token string, now time.Time) (cbdash.User, error)
	DeleteSession(ctx context.Context, token string) error
	UserByToken(ctx context.Context, token string) (cbdash.User, error)
}

// Accounts is what the admin pages change: users, user API tokens and
// agent tokens, and the account log; *store.Store implements it. Every
// change names its actor and is logged by the store in the same
// transaction (RecordAccountEvent logs a new user). Unknown users or
// tokens are cbdash.ErrNotFound, duplicate names and changes that would
// leave no enabled admin cbdash.ErrConflict.
type Accounts interface {
	Users(ctx context.Context) ([]cbdash.User, error)
	UserByName(ctx context.Context, name string) (cbdash.User, []byte, error)
	CreateUser(ctx context.Context, name, role string, passwordHash []byte) (cbdash.User, error)
	SetUserRole(ctx context.Context, actor, name, role string) error
	SetUserDisabled(ctx context.Context, actor, name string, disabled bool) error
	DeleteUser(ctx context.Context, actor, name string) error
	AllUserTokens(ctx context.Context) ([]cbdash.APIToken, error)
	IssueUserToken(ctx context.Context, actor string, userID int64, name string, expires time.Time) (token, ref string, err error)
	IssueAgentToken(ctx context.Context, actor, service string, expires time.Time) (token, ref string, err error)
	RevokeUserToken(ctx context.Context, actor string, id int64) error
	ExpireUserToken(ctx context.Context, actor string, id int64, at time.Time) error
	AgentTokens(ctx context.Context) ([]store.AgentToken, error)
	RevokeAgentToken(ctx context.Context, actor, id string) error
	ExpireAgentToken(ctx context.Context, actor, id string, at time.Time) error
	RecordAccountEvent(ctx context.Context, ev cbdash.AccountEvent) error
	AccountEvents(ctx context.Context, limit int) ([]cbdash.AccountEvent, error)
}

// AgentSessions closes the open connections of an agent token as it is
// revoked; *collector.Collector implements it (it revokes the token in
// the store, then closes its sessions). Without it the token is revoked
// in the store alone and the collector's sweep closes its connections.
type AgentSessions interface {
	RevokeAgentToken(ctx context.Context, actor, id string) (closed int, err error)
}

// Config configures a Server. Its services are wired at compile time,
// one typed field each: Collector, History, Sessions and Accounts are
// required (New fails without them); the optional services (Holds,
// Schedules, Incidents, Alerts, InstanceHistory, FleetHistory,
// AgentSessions, ShadowHistory) turn a feature off when nil, which New logs once, and that feature's pages
// and API answer 404 with the reason (see each field). cmd/cbdash wires
// every one. Every other field has a working zero value.
type Config struct {
	// Collector is the live state, operator commands and the agents'
	// transports (required).
	Collector Collector
	// History is the stored history every page reads (required).
	History History
	// Sessions is login, logout and recognizing callers (required).
	Sessions Sessions
	// Accounts is the admin pages' users and tokens (required).
	Accounts Accounts
	// Holds is the hold service behind the hold pages and the holds API;
	// nil = those answer 404 "holds are not kept by this server".
	Holds HoldService
	// Schedules keeps the drill schedules behind /api/v1/schedules and
	// the holds page's table; nil = the API answers 404 "drill schedules
	// are not kept by this server" and the page shows none.
	Schedules ScheduleService
	// Incidents is the incident store behind the incident pages, their
	// live views and the incidents API; nil = those answer 404
	// "incidents are not recorded by this server".
	Incidents IncidentStore
	// InstanceHistory is the per-instance history drawn as the dependency
	// page's heatmap; nil = the page has no heatmap.
	InstanceHistory InstanceHistory
	// FleetHistory is the fleet's history drawn as the overview's fleet
	// line; nil = the overview has no line and its fragment
	// (/overview/fleet-timeline) answers 404.
	FleetHistory FleetHistory
	// AgentSessions closes an agent token's connections as the admin page
	// revokes it; nil = the store revokes it and the collector's sweep
	// closes them later.
	AgentSessions AgentSessions
	// ShadowHistory is the stored would-be transitions of the breakers'
	// shadow configurations, drawn as the dependency page's shadow lanes
	// and transitions and counted in the replay's shadow rows; nil = the
	// page shows the shadows' settings but none of their transitions.
	ShadowHistory ShadowHistory
	// Logger receives request errors and live-socket trouble; nil
	// discards.
	Logger *slog.Logger
	// Anonymous lets visitors who are not logged in read every page as
	// viewers (wall screens). Commands and admin still need a login.
	Anonymous bool
	// Secure marks cookies Secure; set it when the dashboard is served
	// over TLS (directly or behind a TLS-terminating proxy).
	Secure bool
	// Clock is the dashboard's time: session expiry, the login limiter,
	// "now" on every page and the live re-sort ticker read it; nil =
	// clock.System(). The server passes its one clock.
	Clock clock.Clock
	// SessionTTL is how long a login lasts; 0 = 12 hours.
	SessionTTL time.Duration
	// LiveInterval is the minimum time between two live updates sent to
	// one client (coalescing); 0 = 250 ms, at most 4 updates a second.
	LiveInterval time.Duration
	// LoginBurst and LoginEvery limit failed login attempts (token
	// buckets counted before the password is checked): LoginBurst per
	// user name and 4 x LoginBurst per client address at once, then one
	// per LoginEvery, backing off with each further failure. A client
	// with a valid device cookie of the user is limited by LoginBurst
	// per device instead, and by neither the user's nor its address's
	// bucket (see loginLimiter). 0 = 5 and 12 seconds.
	LoginBurst int
	LoginEvery time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed: for a request from one of them, the client address is the
	// right-most address of the header that is not a trusted proxy. Empty
	// (the default) = the address of the socket's peer, whatever the
	// headers say. Mount installs this as e.IPExtractor.
	TrustedProxies []netip.Prefix
	// MaxHashing bounds how many bcrypt password checks run at once (a
	// login waiting more than 2 s for its turn gets 503); 0 = half the
	// CPUs, at least 1.
	MaxHashing int
	// PasswordCost is the bcrypt cost of the hashes the server makes
	// (accounts added on the admin page) and of the stand-in hash a login
	// naming no account is checked against, so that a wrong name takes as
	// long as a wrong password. Keep it at the cost of the stored hashes
	// (cbdash's own are made at HashPassword's, bcrypt.DefaultCost);
	// 0 = bcrypt.DefaultCost (10), else 4 to 31.
	PasswordCost int
	// Registerer receives the dashboard's Prometheus series (logins and
	// limiter refusals); nil = a private registry.
	Registerer prometheus.Registerer
	// Live caps the /live websockets per session, per address and in
	// total (see LiveLimits; zero values = defaults).
	Live LiveLimits
	// Events caps the /api/v1/events streams (server-sent events) the
	// same way, on counts of their own: per login session or API token,
	// per client address (anonymous viewers) and in total; a stream over
	// a cap is refused with 429 and the cap. Zero values = the defaults of
	// LiveLimits (8, 64, 500).
	Events LiveLimits
	// Reads caps the GET and HEAD requests being answered at once, per
	// client address and in total (see ReadLimits; zero values =
	// defaults, 32 and 256).
	Reads ReadLimits
	// Alerts is the alert service behind the alerts page, the alerts API
	// and the overview's firing count; nil = no alerts page (404) and no
	// count.
	Alerts Alerts
}

// feature is an optional service of Config: the feature it turns on,
// the field that holds it, and whether it is set.
type feature struct {
	name, field string
	on          bool
}

// features are the optional services of c, in the order New logs the
// ones that are off.
func (c Config) features() []feature {
	return []feature{
		{"holds", "Holds", c.Holds != nil},
		{"drill schedules", "Schedules", c.Schedules != nil},
		{"incidents", "Incidents", c.Incidents != nil},
		{"alerts", "Alerts", c.Alerts != nil},
		{"heatmap", "InstanceHistory", c.InstanceHistory != nil},
		{"fleet line", "FleetHistory", c.FleetHistory != nil},
		{"closing a revoked agent token's connections", "AgentSessions", c.AgentSessions != nil},
		{"shadow transitions", "ShadowHistory", c.ShadowHistory != nil},
	}
}

func (c Config) validate() error {
	switch {
	case c.Collector == nil:
		return errors.New("web: Config.Collector is required")
	case c.History == nil:
		return errors.New("web: Config.History is required")
	case c.Sessions == nil:
		return errors.New("web: Config.Sessions is required")
	case c.Accounts == nil:
		return errors.New("web: Config.Accounts is required")
	case c.SessionTTL < 0:
		return errors.New("web: Config.SessionTTL is negative")
	case c.LiveInterval < 0:
		return errors.New("web: Config.LiveInterval is negative")
	case c.LoginBurst < 0 || c.LoginEvery < 0:
		return errors.New("web: Config.LoginBurst or LoginEvery is negative")
	case c.MaxHashing < 0:
		return errors.New("web: Config.MaxHashing is negative")
	case c.PasswordCost != 0 && (c.PasswordCost < bcrypt.MinCost || c.PasswordCost > bcrypt.MaxCost):
		return fmt.Errorf("web: Config.PasswordCost %d is outside bcrypt's %d to %d", c.PasswordCost, bcrypt.MinCost, bcrypt.MaxCost)
	case c.Live.PerSession < 0 || c.Live.PerAddress < 0 || c.Live.Total < 0:
		return errors.New("web: Config.Live: PerSession, PerAddress and Total must not be negative")
	case c.Events.PerSession < 0 || c.Events.PerAddress < 0 || c.Events.Total < 0:
		return errors.New("web: Config.Events: PerSession, PerAddress and Total must not be negative")
	}
	return nil
}

// Server serves the dashboard. It is safe for concurrent use by the HTTP
// server's goroutines; it starts no goroutine of its own: each live
// socket lives in its request's handler until the client leaves or Close.
type Server struct {
	col     Collector
	history History
	shadows ShadowHistory // nil: no shadow transitions
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
	logins  *loginLimiter
	hashing chan struct{} // one slot per bcrypt comparison that may run
	dummy   func() []byte // the stand-in hash for unknown names (dummyHash)
	metrics *metrics
	sparks  *sparkCache
	slots   *liveSlots     // open /live sockets against cfg.Live
	streams *liveSlots     // open /api/v1/events streams against cfg.Events
	reads   *liveSlots     // GET and HEAD requests being answered against cfg.Reads
	tuner   *tune.Service  // replays (tune.go)
	review  *tune.Reviewer // reviews (tune.go)

	done      chan struct{} // closed by Close: live sockets end
	closeOnce sync.Once

	quiet silenceCount // the overview's count of active silences
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrSystem(cfg.Clock)
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.LiveInterval == 0 {
		cfg.LiveInterval = 250 * time.Millisecond
	}
	if cfg.LoginBurst == 0 {
		cfg.LoginBurst = 5
	}
	if cfg.LoginEvery == 0 {
		cfg.LoginEvery = 12 * time.Second
	}
	if cfg.MaxHashing == 0 {
		cfg.MaxHashing = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.PasswordCost == 0 {
		cfg.PasswordCost = bcrypt.DefaultCost
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("web: metrics: %w", err)
	}
	s := &Server{
		col:     cfg.Collector,
		history: cfg.History,
		shadows: cfg.ShadowHistory,
		log:     cfg.Logger,
		now:     cfg.Clock.Now,
		cfg:     cfg,
		logins:  newLoginLimiter(cfg.LoginBurst, 4*cfg.LoginBurst, cfg.LoginEvery),
		hashing: make(chan struct{}, cfg.MaxHashing),
		dummy:   dummyHash(cfg.PasswordCost),
		metrics: m,
		slots:   newLiveSlots(cfg.Live, liveNames, m.streamsRefused.MustCurryWith(prometheus.Labels{"stream": "live"})),
		streams: newLiveSlots(cfg.Events, eventNames, m.streamsRefused.MustCurryWith(prometheus.Labels{"stream": "events"})),
		reads:   newReadSlots(cfg.Reads, m.readsRefused),
		done:    make(chan struct{}),
	}
	s.sparks = newSparkCache(cfg.History, cfg.Clock.Now)
	s.tuner = newTuner(cfg.Collector)
	s.review = tune.NewReviewer(cfg.Collector, cfg.History, cfg.Collector, cfg.Clock.Now).WithReplays(s.tuner)
	if err := cfg.Registerer.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cbdash_reads_in_flight",
		Help: "GET and HEAD requests (pages, API reads) being answered, as --max-reads counts them.",
	}, func() float64 { return float64(s.reads.open()) })); err != nil {
		return nil, fmt.Errorf("web: metrics: %w", err)
	}
	for _, f := range cfg.features() {
		if !f.on {
			s.log.Info("dashboard feature off", "feature", f.name, "because", "Config."+f.field+" is nil")
		}
	}
	return s, nil
}

// Close ends every live socket with "service restart" (1012), which
// makes the pages reconnect by themselves; call it before shutting the
// HTTP server down, since http.Server.Shutdown does not wait for
// websockets. Close is idempotent and safe for concurrent use.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return nil
}

// Mount registers every route of the server on e, in one place: how
// client addresses are found (Config.TrustedProxies, as e.IPExtractor),
// request body limits on every route (before routing), security headers
// on every response, static assets, then the routes in groups that apply
// authentication, CSRF and the actor of audited actions the same way to
// pages and JSON alike:
//
//   - open: health, readiness, metrics (its own token), the agents'
//     websocket and ingest (agent tokens), the OpenAPI document;
//   - login and logout (CSRF);
//   - read: viewer role (or anonymous viewing) for pages and the JSON
//     API's reads;
//   - op: operator role, CSRF for session callers, and the typed actor
//     (actorFrom) that every command, hold, release and note records;
//   - admin: admin role, for the admin pages.
func (s *Server) Mount(e *echo.Echo) {
	e.IPExtractor = ipExtractor(s.cfg.TrustedProxies)
	e.Pre(s.limitBodies)
	e.Use(s.securityHeaders, s.withLogger, s.limitReads)
	mountStatic(e)

	g := routes{e: e, mw: []echo.MiddlewareFunc{s.identify, s.csrf()}}
	g.GET("/login", s.loginPage)
	g.POST("/login", s.login)
	g.POST("/logout", s.logout)

	read := g.with(s.require(cbdash.RoleViewer))
	read.GET("/", s.overview)
	read.GET(fleetFragment, s.fleetTimelinePage)
	read.GET("/dependency", s.dependency)
	read.GET("/timeline", s.timeline)
	read.GET("/audit", s.audit)
	read.GET("/live", s.live)

	op := g.with(s.require(cbdash.RoleOperator))
	op.POST("/dependency/confirm", s.confirm)
	op.POST("/dependency/command", s.command)
	s.mountIncidents(read, op) // incident pages: internal/web/incident.go
	s.mountHolds(read, op)     // hold list, drill reports, fleet-wide holds: internal/web/holds.go
	s.mountAlerts(read, op)    // alerts page and rule editor: internal/web/alerts.go

	// The JSON API: reads need no CSRF token (they change nothing and
	// set no cookie); writes are the op group's.
	apiRead := routes{e: e, mw: []echo.MiddlewareFunc{s.identify, s.require(cbdash.RoleViewer)}}
	s.mountAPI(routes{e: e}, apiRead, op) // internal/web/api*.go

	admin := g.with(s.require(cbdash.RoleAdmin))
	admin.GET("/admin", s.adminPage)
	admin.POST("/admin/users", s.addUser)
	admin.POST("/admin/tokens", s.addUserToken)
	admin.POST("/admin/agent-tokens", s.addAgentToken)
	admin.POST("/admin/users/role", s.setRole)
	admin.POST("/admin/users/disable", s.disableUser)
	admin.POST("/admin/users/enable", s.enableUser)
	admin.POST("/admin/users/delete", s.deleteUser)
	admin.POST("/admin/tokens/revoke", s.revokeToken)
	admin.POST("/admin/tokens/expire", s.expireToken)
}

// routes registers handlers on an echo.Echo with middlewares applied to
// each route. It replaces echo.Group on purpose: a Group with middlewares
// registers catch-all "not found" routes that run those middlewares, so
// with an empty prefix every unknown path (even /api/v1/nosuch) answered
// 401, 403 or a login redirect instead of 404.
type routes struct {
	e  *echo.Echo
	mw []echo.MiddlewareFunc
}

// with returns routes that run r's middlewares, then ms.
func (r routes) with(ms ...echo.MiddlewareFunc) routes {
	return routes{e: r.e, mw: append(slices.Clip(r.mw), ms...)}
}

// GET registers a GET route behind r's middlewares.
func (r routes) GET(path string, h echo.HandlerFunc) { r.e.GET(path, h, r.mw...) }

// POST registers a POST route behind r's middlewares.
func (r routes) POST(path string, h echo.HandlerFunc) { r.e.POST(path, h, r.mw...) }

// PUT registers a PUT route behind r's middlewares.
func (r routes) PUT(path string, h echo.HandlerFunc) { r.e.PUT(path, h, r.mw...) }

// DELETE registers a DELETE route behind r's middlewares.
func (r routes) DELETE(path string, h echo.HandlerFunc) { r.e.DELETE(path, h, r.mw...) }

// errorf wraps a sentinel with a message: errorf(cbdash.ErrInvalid,
// "reason is required").
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
