package main

import (
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/store"
)

func newServeCmd(clk clock.Clock) *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the collector and the dashboard",
		Long: `Run the collector (agents connect to /api/v1/agent) and the dashboard on one
address, with history in one SQLite file. The first start creates an "admin"
account and logs its password once. SIGINT or SIGTERM shut it down cleanly:
requests in progress finish, agent data in flight is stored, the database is
closed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			log := o.logger(cmd.ErrOrStderr())
			gogc, fromEnv := tuneGC(os.LookupEnv)
			prof, err := startPprof(o.Pprof, log)
			if err != nil {
				return err
			}
			defer prof.stop()
			srv, err := openServer(cmd.Context(), o, log, clk)
			if err != nil {
				return err
			}
			log.Info("cbdash is serving", "url", srv.URL(), "agents", srv.AgentURL(), "db", store.MaskDSN(o.DB), "anonymous", o.Anonymous, "gogc", gogc, "gogc_from_env", fromEnv)
			if o.MetricsToken == "" && !loopbackOnly(srv.ln.Addr()) {
				log.Warn("/metrics is open to anyone who can reach this address; --metrics-token closes it", "addr", srv.ln.Addr().String())
			}
			return srv.run(cmd.Context(), nil)
		},
	}
	o.bind(cmd.Flags(), "./cbdash.db", false, incident.DefaultQuiet)
	return cmd
}

// loopbackOnly reports whether addr can only be reached from this
// machine.
func loopbackOnly(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
