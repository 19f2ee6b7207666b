package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
)

// serveOptions are the flags of `cbdash serve` and `cbdash demo`.
type serveOptions struct {
	Addr string // --addr: listen address
	DB   string // --db: SQLite file
	// Retention of each history level (0 = the store's default).
	Retention struct {
		PerSecond, PerMinute, PerHour, Transitions time.Duration
	}
	TLSCert, TLSKey string        // --tls-cert, --tls-key: serve HTTPS when both are set
	Anonymous       bool          // --anonymous: read-only viewing without login
	LogLevel        string        // --log-level
	LogFormat       string        // --log-format
	AdminPassword   string        // --admin-password: for the first start only
	MetricsToken    string        // --metrics-token
	IncidentQuiet   time.Duration // --incident-quiet
	IncidentShare   float64       // --incident-share: percent of live instances not closed at once to open an incident
	IncidentForced  bool          // --incident-include-forced: a force open (a drill) starts an incident too
	MaxHold         time.Duration // --max-hold: the longest hold accepted (0 = 24 h)
	StopIf          []string      // --stop-if: the default stop conditions of every hold
	// Quorum (--quorum) turns quorum-advised trips on, server-wide, for the
	// dependencies QuorumRules (--quorum-rule) name; off, the rules are
	// kept and nothing is advised (the kill switch).
	Quorum      bool
	QuorumRules []string
	// QuorumProbes (--quorum-probes, default true) lets rules with
	// probes=K run the probe rotation; false turns it off server-wide
	// (its kill switch) and keeps the advisories.
	QuorumProbes   bool
	AckDelay       time.Duration // --ack-delay: how long an agent's ack may be held to go with the next (collector.Config.AckDelay)
	TrustedProxies []string      // --trusted-proxy: CIDRs whose X-Forwarded-For is believed
	SecureCookies  bool          // --secure-cookies: Secure cookies and HSTS behind a TLS-terminating proxy
	// AllowPrivateWebhooks lets alert webhooks reach loopback, private and
	// link-local addresses (--allow-private-webhooks).
	AllowPrivateWebhooks bool
	// ExternalURL is the dashboard's address in alert payloads' links
	// (--external-url; alert.Config.ExternalURL).
	ExternalURL string
	// Limits of agent tokens, services and the collector
	// (--max-instances-per-token, --max-breakers-per-token,
	// --max-dependencies, the -per-service and --max-dependencies-per-token
	// quotas) and of /live sockets
	// (--max-live-per-session, --max-live-per-address, --max-live); 0 =
	// the defaults of collector.Limits and web.LiveLimits.
	Limits collector.Limits
	Live   web.LiveLimits
	// Events caps the event streams (/api/v1/events) as Live caps /live
	// (--max-event-streams-per-session, --max-event-streams-per-address,
	// --max-event-streams).
	Events web.LiveLimits
	// Reads caps the GET and HEAD requests being answered at once
	// (--max-reads-per-address, --max-reads).
	Reads web.ReadLimits
	// Conn are the HTTP server's timeouts and connection caps
	// (--read-header-timeout, --read-timeout, --write-timeout,
	// --idle-timeout, --max-connections-per-address, --max-connections).
	Conn        connOptions
	Hystrix     []string    // --hystrix: Hystrix streams to read, "URL,service=...,instance=..."
	Prometheus  []string    // --prometheus: Prometheus endpoints to scrape, same form
	SourcesFile string      // --sources: a JSON file of targets (source.File)
	OTLP        otlpOptions // --otlp-*: OpenTelemetry metrics export
	Pprof       string      // --pprof: loopback address serving net/http/pprof ("" = off)

	// targets are the pull sources of --hystrix, --prometheus and
	// --sources, set by validate.
	targets []source.Target

	// quietIncidents logs only the incident service's warnings and
	// errors: the demo's looping faults update incidents many times a
	// minute, which would drown its log.
	quietIncidents bool
	// bannerShowsAdmin: the caller (the demo) prints a generated admin
	// password itself, so the log does not repeat it.
	bannerShowsAdmin bool
}

// bind declares the flags on fs; db, anonymous and quiet are the defaults
// of --db, --anonymous and --incident-quiet, which differ between serve
// and demo.
func (o *serveOptions) bind(fs *pflag.FlagSet, db string, anonymous bool, quiet time.Duration) {
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "address to listen on (host:port)")
	fs.StringVar(&o.DB, "db", db, "the database: a SQLite file (created if missing), or PostgreSQL as postgres://user:password@host:5432/dbname or host=... user=... password=... dbname=...")
	fs.Var(dayDuration{&o.Retention.PerSecond}, "retention-seconds", "how long per-second history is kept (e.g. 24h, 2d; default 24h)")
	fs.Var(dayDuration{&o.Retention.PerMinute}, "retention-minutes", "how long per-minute history is kept (default 30d)")
	fs.Var(dayDuration{&o.Retention.PerHour}, "retention-hours", "how long per-hour history is kept (default 365d)")
	fs.Var(dayDuration{&o.Retention.Transitions}, "retention-transitions", "how long transitions are kept (default 365d)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key, serve HTTPS")
	fs.StringVar(&o.TLSKey, "tls-key", "", "TLS private key file (PEM)")
	fs.BoolVar(&o.Anonymous, "anonymous", anonymous, "let anyone view the dashboard read-only without logging in")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.AdminPassword, "admin-password", "", "password of the admin account made on the first start (default: random, printed once)")
	fs.StringVar(&o.MetricsToken, "metrics-token", "", "bearer token required by /metrics (default: none required)")
	fs.DurationVar(&o.IncidentQuiet, "incident-quiet", quiet, "how long every instance must stay closed before an incident ends")
	fs.Float64Var(&o.IncidentShare, "incident-share", 0, "percent (0..100) of a dependency's live instances that must be open, half-open or forced open at once for an incident to open (0 = one instance is enough)")
	fs.BoolVar(&o.IncidentForced, "incident-include-forced", false, "let a force open (a drill) start an incident; by default forced states only extend an incident a trip opened")
	fs.DurationVar(&o.MaxHold, "max-hold", 24*time.Hour, "the longest hold (force open / force closed) accepted from the dashboard, the API and the CLI (0 = 24h)")
	fs.StringArrayVar(&o.StopIf, "stop-if", nil, "a stop condition every drill (hold) gets unless its operator drops it with a reason, e.g. 'fallback-failure-rate>20%', 'error-rate>30% for 10s', 'p99>500ms' (repeatable; default: none)")
	fs.BoolVar(&o.Quorum, "quorum", false, "send quorum-advised trips for the dependencies --quorum-rule names (false: none, whatever the rules; the server-wide kill switch)")
	fs.BoolVar(&o.QuorumProbes, "quorum-probes", true, "with --quorum, run the probe rotation for the rules with probes=K (K instances in turn probe a dependency open fleet-wide, the others wait for their verdict); false: every instance probes on its own whatever the rules (the rotation's server-wide kill switch)")
	fs.StringArrayVar(&o.QuorumRules, "quorum-rule", nil, "with --quorum, the dependencies whose instances are advised to open when a quorum of them opened on their own: 'SERVICE/BREAKER:q=50%,m=3,box=30s' (either may be *; the first matching rule decides; 'SERVICE/BREAKER:off' keeps one out) (repeatable; default: none)")
	fs.DurationVar(&o.AckDelay, "ack-delay", 0, "how long an acknowledgement to an agent may wait to be written with the next ones as one (acks are cumulative), e.g. 2s; 0 = each at once")
	fs.StringSliceVar(&o.TrustedProxies, "trusted-proxy", nil, "CIDR of a reverse proxy whose X-Forwarded-For gives the client address (repeatable; default: none, the socket's address is used)")
	fs.IntVar(&o.Limits.MaxInstancesPerToken, "max-instances-per-token", 10000, "the most instances one agent token may have known to the collector at once")
	fs.IntVar(&o.Limits.MaxBreakersPerToken, "max-breakers-per-token", 200000, "the most breakers the instances of one agent token may declare in all")
	fs.IntVar(&o.Limits.MaxDependencies, "max-dependencies", 10000, "the most dependencies (service and breaker name) the collector holds; hellos adding more are refused")
	fs.IntVar(&o.Limits.MaxInstancesPerService, "max-instances-per-service", 5000, "the most instances one service may have known to the collector at once, whatever the agent tokens")
	fs.IntVar(&o.Limits.MaxBreakersPerService, "max-breakers-per-service", 100000, "the most breakers the instances of one service may declare in all")
	fs.IntVar(&o.Limits.MaxDependenciesPerService, "max-dependencies-per-service", 1000, "the most dependencies one service may have; hellos adding more are refused")
	fs.IntVar(&o.Limits.MaxDependenciesPerToken, "max-dependencies-per-token", 0, "the most dependencies the instances of one agent token may declare; below --max-dependencies (0 = half of it)")
	fs.IntVar(&o.Limits.MaxConnectionsPerToken, "max-connections-per-token", 10000, "the most agent websocket connections one agent token may hold open at once; one more is refused (retry later)")
	fs.IntVar(&o.Live.PerSession, "max-live-per-session", 8, "the most live dashboard connections (/live) of one login session or API token")
	fs.IntVar(&o.Live.PerAddress, "max-live-per-address", 64, "the most live dashboard connections of one client address")
	fs.IntVar(&o.Live.Total, "max-live", 500, "the most live dashboard connections of the server")
	fs.IntVar(&o.Events.PerSession, "max-event-streams-per-session", 8, "the most event streams (/api/v1/events) of one login session or API token")
	fs.IntVar(&o.Events.PerAddress, "max-event-streams-per-address", 64, "the most event streams of one client address")
	fs.IntVar(&o.Events.Total, "max-event-streams", 500, "the most event streams of the server")
	fs.IntVar(&o.Reads.PerAddress, "max-reads-per-address", 32, "the most GET and HEAD requests (pages, API reads) being answered at once to one client address; more are answered 503 (a client that does not read its answers holds them in memory)")
	fs.IntVar(&o.Reads.Total, "max-reads", 256, "the most GET and HEAD requests being answered at once by the server")
	o.Conn.bind(fs)
	fs.StringVar(&o.ExternalURL, "external-url", "", "the dashboard's address as people reach it (https://cbdash.example.com): alert notifications link to the dependency's page there, an open alert's also to its incident's (default: no link)")
	fs.BoolVar(&o.AllowPrivateWebhooks, "allow-private-webhooks", false, "let alert webhooks call loopback, private, link-local and multicast addresses (default: refused, as a guard against server-side request forgery)")
	fs.StringArrayVar(&o.Hystrix, "hystrix", nil, "a Hystrix stream to read, as URL,service=NAME[,instance=NAME][,header=Name: value] (repeatable): hystrix-go, Spring/resilience4j, opossum-hystrix, Turbine")
	fs.StringArrayVar(&o.Prometheus, "prometheus", nil, "a Prometheus endpoint to scrape for resilience4j or opossum-prometheus breakers, as URL,service=NAME[,instance=NAME][,interval=5s][,header=Name: value] (repeatable)")
	fs.StringVar(&o.SourcesFile, "sources", "", `a JSON file of streams and endpoints to read: {"targets": [{"kind": "hystrix", "url": ..., "service": ..., "instance": ..., "header": {...}}]}`)
	o.OTLP.bind(fs)
	fs.StringVar(&o.Pprof, "pprof", "", "serve Go profiles (net/http/pprof) on this loopback address, e.g. 127.0.0.1:6060 (default: off)")
	fs.BoolVar(&o.SecureCookies, "secure-cookies", false, "mark cookies Secure and send HSTS: for a dashboard served over HTTPS by a TLS-terminating proxy (implied by --tls-cert)")
}

// trustedProxies parses --trusted-proxy.
func (o *serveOptions) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range o.TrustedProxies {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return nil, usageError{fmt.Errorf("--trusted-proxy %q: want a CIDR such as 10.0.0.0/8 or an address", s)}
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// validate checks what the flags alone can tell, naming the flag.
func (o *serveOptions) validate() error {
	if o.Addr == "" {
		return usageError{fmt.Errorf("--addr is empty")}
	}
	if o.DB == "" {
		return usageError{fmt.Errorf("--db is empty")}
	}
	if err := store.CheckDSN(o.DB); err != nil {
		return usageError{fmt.Errorf("--db: %w", err)}
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return usageError{fmt.Errorf("--tls-cert and --tls-key go together (got only one)")}
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		return usageError{err}
	}
	if math.IsNaN(o.IncidentShare) || o.IncidentShare < 0 || o.IncidentShare > 100 {
		return usageError{fmt.Errorf("--incident-share must be within 0..100 (got %v)", o.IncidentShare)}
	}
	if o.IncidentQuiet < 0 {
		return usageError{fmt.Errorf("--incident-quiet must not be negative (got %v)", o.IncidentQuiet)}
	}
	for flag, v := range map[string]int{"--max-instances-per-token": o.Limits.MaxInstancesPerToken, "--max-breakers-per-token": o.Limits.MaxBreakersPerToken,
		"--max-dependencies": o.Limits.MaxDependencies, "--max-connections-per-token": o.Limits.MaxConnectionsPerToken, "--max-live-per-session": o.Live.PerSession, "--max-live-per-address": o.Live.PerAddress, "--max-live": o.Live.Total,
		"--max-event-streams-per-session": o.Events.PerSession, "--max-event-streams-per-address": o.Events.PerAddress, "--max-event-streams": o.Events.Total,
		"--max-reads-per-address": o.Reads.PerAddress, "--max-reads": o.Reads.Total} {
		if v < 0 {
			return usageError{fmt.Errorf("%s must not be negative (got %d; 0 = the default)", flag, v)}
		}
	}
	if err := o.Conn.validate(); err != nil {
		return err
	}
	if err := o.validateQuotas(); err != nil {
		return err
	}
	for _, c := range o.StopIf {
		if _, err := cbdash.ParseStopCondition(c); err != nil {
			return usageError{fmt.Errorf("--stop-if: %w", err)}
		}
	}
	if err := o.validateQuorum(); err != nil {
		return err
	}
	if o.MaxHold < 0 {
		return usageError{fmt.Errorf("--max-hold must not be negative (got %v): every hold ends by itself", o.MaxHold)}
	}
	if o.AckDelay < 0 || o.AckDelay > 10*time.Second {
		return usageError{fmt.Errorf("--ack-delay must be between 0 and 10s (got %v): agents give up on a collector that does not acknowledge for 30 s", o.AckDelay)}
	}
	if _, err := o.trustedProxies(); err != nil {
		return err
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return usageError{fmt.Errorf("--log-format %q: want text or json", o.LogFormat)}
	}
	if err := o.OTLP.validate(); err != nil {
		return err
	}
	return o.parseTargets()
}

// validateQuotas checks the quotas of agent tokens and services
// (collector.Limits): none negative, and one token's dependencies below
// the collector's, so that no one token can fill it.
func (o *serveOptions) validateQuotas() error {
	l := o.Limits
	for flag, v := range map[string]int{"--max-instances-per-service": l.MaxInstancesPerService, "--max-breakers-per-service": l.MaxBreakersPerService,
		"--max-dependencies-per-service": l.MaxDependenciesPerService, "--max-dependencies-per-token": l.MaxDependenciesPerToken} {
		if v < 0 {
			return usageError{fmt.Errorf("%s must not be negative (got %d; 0 = the default)", flag, v)}
		}
	}
	if all := cmp.Or(l.MaxDependencies, 10000); all > 1 && l.MaxDependenciesPerToken >= all {
		return usageError{fmt.Errorf("--max-dependencies-per-token (%d) must be below --max-dependencies (%d): one agent token must not be able to fill the server", l.MaxDependenciesPerToken, all)}
	}
	return nil
}

// parseTargets reads --hystrix, --prometheus and --sources into targets.
func (o *serveOptions) parseTargets() error {
	o.targets = nil
	for kind, specs := range map[string][]string{source.KindHystrix: o.Hystrix, source.KindPrometheus: o.Prometheus} {
		for _, spec := range specs {
			t, err := source.ParseTarget(kind, spec)
			if err != nil {
				return usageError{err}
			}
			o.targets = append(o.targets, t)
		}
	}
	if o.SourcesFile != "" {
		ts, err := source.LoadFile(o.SourcesFile)
		if err != nil {
			return usageError{fmt.Errorf("--sources: %w", err)}
		}
		o.targets = append(o.targets, ts...)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// logger makes the process's logger, the only one: libraries get it
// passed in.
func (o *serveOptions) logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(o.LogLevel)
	ho := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// dayDuration is a time.Duration flag that also takes whole days ("30d").
type dayDuration struct{ d *time.Duration }

func (v dayDuration) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	if *v.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*v.d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}

func (v dayDuration) Set(s string) error {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 36h or 30d)", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("%q is not a duration (like 36h or 30d)", s)
		}
	}
	if d < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*v.d = d
	return nil
}

func (v dayDuration) Type() string { return "duration" }

// floorHandler drops records below its level, whatever the level of the
// handler it wraps.
type floorHandler struct {
	slog.Handler
	floor slog.Level
}

func (h floorHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.floor && h.Handler.Enabled(ctx, l)
}

func (h floorHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return floorHandler{h.Handler.WithAttrs(as), h.floor}
}

func (h floorHandler) WithGroup(name string) slog.Handler {
	return floorHandler{h.Handler.WithGroup(name), h.floor}
}

// validateQuorum checks --quorum-rule, and that --quorum has one.
func (o *serveOptions) validateQuorum() error {
	for _, r := range o.QuorumRules {
		if _, err := cbdash.ParseQuorumRule(r); err != nil {
			return usageError{fmt.Errorf("--quorum-rule: %w", err)}
		}
	}
	if o.Quorum && len(o.QuorumRules) == 0 {
		return usageError{fmt.Errorf("--quorum needs a --quorum-rule: quorum-advised trips are on only for the dependencies a rule names")}
	}
	return nil
}

// quorumRules is --quorum-rule read when --quorum is on, nil otherwise
// (validate has refused a bad rule).
func (o *serveOptions) quorumRules() []cbdash.QuorumRule {
	if !o.Quorum {
		return nil
	}
	var out []cbdash.QuorumRule
	for _, s := range o.QuorumRules {
		if r, err := cbdash.ParseQuorumRule(s); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// defaultStops is --stop-if read (validate has refused a bad one).
func (o *serveOptions) defaultStops() []cbdash.StopCondition {
	var out []cbdash.StopCondition
	for _, s := range o.StopIf {
		if c, err := cbdash.ParseStopCondition(s); err == nil {
			out = append(out, c)
		}
	}
	return out
}
