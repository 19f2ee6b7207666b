package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/demo"
	"github.com/cbdash/cbdash/internal/dsn"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// demoOperator is the demo's operator account, printed on start.
const demoOperator = "operator"

type demoOptions struct {
	serveOptions
	Rate   float64 // --rate: requests per second per instance
	Public bool    // --public: allow an --addr beyond loopback
}

func newDemoCmd(clk clock.Clock) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the server with a simulated fleet of services on loopback",
		Long: `Run the server and, in the same process, a simulated fleet: checkout (3
instances), search (2) and catalog (2), each instance with its own agent,
calling real HTTP dependency servers (payments, inventory, pricing,
recommendations, search) through sdk/breaker. The dependencies follow a
one-minute fault script that loops: error bursts, an outage, a slow recovery,
business errors that trip nothing, creeping latency. Breakers open and close
within the first minute.

Anonymous read-only viewing is on; log in as operator/operator to trip,
release and reset breakers, or as admin (its password is printed at the
top of the output, at every start) to manage accounts and tokens. On
loopback the demo runs an alert receiver of its own, lets alert webhooks
reach loopback (--allow-private-webhooks) and keeps an alert rule pointed
at the receiver, which prints every notification it gets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if o.TLSCert != "" {
				return usageError{errors.New("--tls-cert: the demo runs on loopback without TLS; use serve for TLS")}
			}
			if o.Rate <= 0 || o.Rate > 1000 {
				return usageError{fmt.Errorf("--rate must be within (0, 1000] (got %v)", o.Rate)}
			}
			if !o.Public && !loopbackAddr(o.Addr) {
				return usageError{fmt.Errorf("--addr %q is beyond loopback: the demo has a fixed operator/operator login and anonymous viewing; pass --public to serve it there anyway", o.Addr)}
			}
			return runDemo(cmd.Context(), o, clk, cmd.OutOrStdout(), cmd.ErrOrStderr(), nil)
		},
	}
	o.bind(cmd.Flags(), "./cbdash-demo.db", true, 20*time.Second) // the demo's script has 30 s of calm a loop
	cmd.Flags().Float64Var(&o.Rate, "rate", 25, "requests per second served by each instance of the fleet")
	cmd.Flags().BoolVar(&o.Public, "public", false, "allow --addr beyond loopback (the demo's operator/operator login is then open to the network)")
	return cmd
}

// runDemo serves with a fleet until ctx is done, the server and the fleet
// (its fault script, breakers and agents) on the one clock clk. The fleet starts once
// the collector is ready (so that no agent is turned away) and stops
// first, so that its agents can flush to the collector. ready, if not
// nil, is told the server's URL and the demo's credentials once
// everything runs.
//
// On loopback (without --public) the demo also runs a built-in alert
// receiver, lets alert webhooks reach loopback (--allow-private-webhooks)
// and keeps an alert rule pointed at the receiver, which prints what it
// gets to stdout.
func runDemo(ctx context.Context, o demoOptions, clk clock.Clock, stdout, stderr io.Writer, ready func(url string, d demoSetup)) error {
	log := o.logger(stderr)
	o.quietIncidents = true
	o.bannerShowsAdmin = true
	out := &lockedWriter{w: stdout}
	var rcv *demoReceiver
	if !o.Public {
		var err error
		if rcv, err = startDemoReceiver(out); err != nil {
			return err
		}
		defer rcv.close(context.WithoutCancel(ctx))
		o.AllowPrivateWebhooks = true
	}
	srv, err := openServer(ctx, o.serveOptions, log, clk)
	if err != nil {
		return err
	}
	setup, err := setupDemo(ctx, srv.store, demoTokensFile(o.DB), srv.adminPassword)
	if err != nil {
		_ = srv.closeStore()
		return err
	}
	if rcv != nil {
		setup.receiver = rcv.url
	}

	var (
		mu      sync.Mutex
		fleet   *demo.Fleet
		stopped bool
	)
	stopFleet := func(ctx context.Context) {
		mu.Lock()
		f := fleet
		fleet, stopped = nil, true
		mu.Unlock()
		if f != nil {
			if err := f.Close(ctx); err != nil {
				log.Warn("stopping the demo fleet", "err", err)
			}
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.run(runCtx, stopFleet) }()

	if err := waitReady(runCtx, srv.URL()+"/readyz"); err != nil {
		cancel()
		if runErr := <-done; runErr != nil || ctx.Err() == nil {
			return errors.Join(err, runErr)
		}
		return nil // interrupted while starting
	}
	fleetStart := clk.Now() // the scripts' start: the drills are timed from it
	mu.Lock()
	if !stopped {
		fleet, err = demo.StartFleet(demo.FleetConfig{
			CollectorURL: srv.AgentURL(), Token: setup.agentToken, Rate: o.Rate, Logger: log, Clock: clk,
		})
	}
	mu.Unlock()
	if err != nil {
		cancel()
		return errors.Join(err, <-done)
	}
	if rcv != nil {
		pointDemoRule(runCtx, srv.alerts, rcv.url, log)
	}
	printBanner(out, srv.URL(), setup, o.Anonymous)
	if ready != nil {
		ready(srv.URL(), setup)
	}
	drilled := make(chan struct{})
	go func() {
		defer close(drilled)
		runDrills(runCtx, srv.col, clk, log, fleetStart)
	}()
	err = <-done
	cancel()
	<-drilled
	return err
}

// The demo's scripted operator drills, as an operator drilling the
// fallbacks would, so that the holds list, the audit log and the drill
// reports have something true to show: demoDrillAfter after start (while
// the pricing and inventory scripts are still healthy: no incident open,
// the caches warm), then every demoDrillEvery (a whole number of loops of
// those scripts, 90 s and 100 s, so that each drill falls at the same
// point every time), checkout's pricing and inventory breakers are forced
// open for demoDrillFor with the stop condition demoDrillStop. The
// pricing fallbacks serve a cached price for 10 s, then fail: that drill
// is STOPPED by its stop condition about 11 s in. The inventory fallbacks
// assume stock and serve: that drill runs its time and passes. A drill
// pre-flight refuses (say an incident still open on the dependency) is
// tried again every demoDrillRetry, for at most a minute.
const (
	demoDrillAfter = 3 * time.Second
	demoDrillEvery = 15 * time.Minute
	demoDrillFor   = 25 * time.Second
	demoDrillRetry = 5 * time.Second
	demoDrillStop  = "fallback-failure-rate>20%"
)

// demoDrills are the demo's drills: the breaker of checkout each holds
// open, and why.
var demoDrills = []struct{ breaker, reason string }{
	{"pricing", "scripted drill: do checkout's pricing fallbacks serve? (a cached price for 10 s only)"},
	{"inventory", "scripted drill: do checkout's inventory fallbacks serve? (they assume stock)"},
}

// runDrills runs the demo's drills on the demo's schedule, counted from
// the scripts' start, until ctx is done.
func runDrills(ctx context.Context, col *collector.Collector, clk clock.Clock, log *slog.Logger, start time.Time) {
	wait := max(0, demoDrillAfter-clk.Now().Sub(start))
	for clock.Sleep(clk, wait, ctx.Done()) {
		wait = demoDrillEvery
		for _, d := range demoDrills {
			runDrill(ctx, col, clk, log, d.breaker, d.reason)
		}
	}
}

// runDrill holds checkout's breaker open for demoDrillFor with the stop
// condition demoDrillStop, trying again while pre-flight refuses it.
func runDrill(ctx context.Context, col *collector.Collector, clk clock.Clock, log *slog.Logger, breaker, reason string) {
	stop, _ := cbdash.ParseStopCondition(demoDrillStop)
	for try := 0; try < int(time.Minute/demoDrillRetry); try++ {
		h, err := col.CreateHold(ctx, cbdash.Actor{Name: "demo", Kind: cbdash.ActorSystem}, cbdash.HoldRequest{
			Selector: cbdash.Selector{Service: "checkout", Breaker: breaker}, Action: protocol.ActionForceOpen,
			TTL: demoDrillFor, Reason: reason, StopIf: []cbdash.StopCondition{stop},
		})
		if err == nil {
			log.Info("demo drill: checkout/"+breaker+" forced open", "for", demoDrillFor, "stop_if", demoDrillStop, "report", "/holds/"+h.ID)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, cbdash.ErrConflict) {
			log.Warn("demo drill", "breaker", breaker, "err", err)
			return
		}
		log.Info("demo drill refused by pre-flight, trying again", "breaker", breaker, "in", demoDrillRetry, "err", err)
		if !clock.Sleep(clk, demoDrillRetry, ctx.Done()) {
			return
		}
	}
}

// waitReady polls url until it answers 200, for at most 30 s.
func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server did not become ready (%s): %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond): // real time: polling a socket
		}
	}
}

type demoSetup struct {
	agentToken string // for the fleet's agents
	apiToken   string // the operator's, for the CLI
	password   string // the operator's
	// admin is the admin account's password: generated at its first
	// start and kept with the tokens; "" when unknown (set by hand since,
	// or given by --admin-password).
	admin    string
	receiver string // the built-in alert receiver's URL; "" with --public
}

// lockedWriter serializes writes to w: the banner and the alert
// receiver's lines share the demo's stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// setupDemo makes the operator account (unless it exists from an earlier
// run) and the demo's two tokens: an agent token for the fleet and an API
// token for the operator's CLI. The tokens are kept in the file tokens
// (mode 0600, beside the demo's database) and reused by the next start
// while the store still accepts them, so restarts do not pile up tokens
// that can report for any service. admin is the admin account's password
// when this start created it: it is kept in the same file, and a later
// start shows it again while it is still the admin's.
func setupDemo(ctx context.Context, st *store.Store, tokens, admin string) (demoSetup, error) {
	var d demoSetup
	d.password = demoOperator
	hash, err := web.HashPassword(d.password)
	if err != nil {
		return d, err
	}
	u, err := st.CreateUser(ctx, demoOperator, cbdash.RoleOperator, hash)
	if errors.Is(err, cbdash.ErrConflict) { // an earlier start made it: its password, unless changed since
		var kept []byte
		if u, kept, err = st.UserByName(ctx, demoOperator); err == nil && bcrypt.CompareHashAndPassword(kept, []byte(demoOperator)) != nil {
			d.password = "(as set before)"
		}
	}
	if err != nil {
		return d, fmt.Errorf("demo: operator account: %w", err)
	}
	var saved struct {
		Agent string `json:"agent"`
		API   string `json:"api"`
		Admin string `json:"admin,omitempty"`
	}
	d.admin = admin
	if data, err := os.ReadFile(tokens); err == nil && json.Unmarshal(data, &saved) == nil {
		if _, hash, err := st.UserByName(ctx, web.AdminName); admin == "" && saved.Admin != "" && err == nil &&
			bcrypt.CompareHashAndPassword(hash, []byte(saved.Admin)) == nil {
			d.admin = saved.Admin
		}
		if svc, err := st.CheckAgentToken(ctx, saved.Agent); err == nil && svc == "" {
			d.agentToken = saved.Agent
		}
		if tu, err := st.UserByToken(ctx, saved.API); err == nil && tu.ID == u.ID {
			d.apiToken = saved.API
		}
	}
	if d.agentToken == "" {
		if d.agentToken, err = st.CreateAgentToken(ctx, ""); err != nil {
			return d, fmt.Errorf("demo: agent token: %w", err)
		}
	}
	if d.apiToken == "" {
		if d.apiToken, err = st.CreateUserToken(ctx, u.ID, "demo CLI"); err != nil {
			return d, fmt.Errorf("demo: API token: %w", err)
		}
	}
	saved.Agent, saved.API, saved.Admin = d.agentToken, d.apiToken, d.admin
	data, _ := json.Marshal(saved)
	if err := writeSecret(tokens, data); err != nil {
		return d, fmt.Errorf("demo: keep the tokens for the next start: %w", err)
	}
	return d, nil
}

// writeSecret replaces the file path with data, readable by its owner
// only (mode 0600) whatever the mode of a file that was there before
// (os.WriteFile keeps an existing file's mode) and the umask: data goes to
// a new file in the same folder (os.CreateTemp makes it 0600), which is
// then renamed over path, so no reader ever sees a part of it.
func writeSecret(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a failure; after the rename there is none
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// loopbackAddr reports whether addr (host:port) listens on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func printBanner(w io.Writer, url string, d demoSetup, anonymous bool) {
	view := "log in to view"
	if anonymous {
		view = "anyone can view it read-only"
	}
	admin := d.admin
	if admin == "" {
		admin = "(as set before; ./bin/cbdash user passwd admin sets a new one)"
	}
	receiver := ""
	if d.receiver != "" {
		receiver = fmt.Sprintf(`  alert receiver:  %s  (rule %q on /alerts;
                   what it gets is printed here, "demo alert receiver got: ...")
`, d.receiver, demoRuleName)
	}
	fmt.Fprintf(w, `
cbdash demo: %s  (%s)
  operator login:  %s / %s   (trip, release and reset breakers)
  admin login:     %s / %s   (also accounts and tokens, on /admin)
%s  JSON API:        curl %s/api/v1/dependencies
  command line:    CBDASH_SERVER=%s CBDASH_TOKEN=%s \
                   ./bin/cbdash trip checkout/payments --for 1m --reason "trying it"
  Breakers open and close within the first minute. Ctrl-C stops the demo.

`, url, view, demoOperator, d.password, web.AdminName, admin, receiver, url, url, d.apiToken)
}

// demoTokensFile is where the demo keeps its tokens between runs: beside
// its SQLite file, or in the working directory for a PostgreSQL database
// (named after the database, so two demos on two databases keep theirs).
func demoTokensFile(db string) string {
	if !store.IsPostgres(db) {
		return db + ".tokens"
	}
	name := "cbdash-demo"
	if d := dsn.Database(db); d != "" { // never the DSN itself: a keyword/value one has its password in the middle
		name = "cbdash-demo-" + d
	}
	return name + ".tokens"
}
