package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/loadgen"
)

type loadgenOptions struct {
	clientOptions
	AgentToken      string
	AgentServers    []string
	Service         string
	Instances       int
	Breakers        int
	Interval        time.Duration
	Duration        time.Duration
	TransitionEvery time.Duration
	DialConcurrency int
	JSON            bool
	MetricsToken    string
	DB              string
}

// newLoadgenCmd is the loadgen command; its simulated agents stamp what
// they send with clk, as real agents stamp with their clock.
func newLoadgenCmd(clk clock.Clock) *cobra.Command {
	var o loadgenOptions
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Load a running server with simulated agents and measure it",
		Long: `Connect many simulated agents (real websockets, the wire protocol, no
breakers) to a running server, send a window report per breaker every
--interval and a transition now and then, and measure the window reports the
server stored per second and how long a transition takes to reach a
subscriber of /api/v1/events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.AgentToken == "" {
				return usageError{errors.New("no agent token: give one with --agent-token or CBDASH_AGENT_TOKEN (cbdash token create --service '*')")}
			}
			if _, err := o.client(false); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			res, err := loadgen.Run(cmd.Context(), loadgen.Config{
				URL: o.Server, AgentURLs: o.AgentServers, Token: o.AgentToken, ReadToken: o.Token, Service: o.Service,
				Instances: o.Instances, BreakersPerInstance: o.Breakers, Interval: o.Interval,
				Duration: o.Duration, TransitionEvery: o.TransitionEvery, DialConcurrency: o.DialConcurrency,
				Logger: log, Clock: clk, MetricsToken: o.MetricsToken, DBSize: dbSize(o.DB),
			})
			if err != nil {
				if errors.Is(err, loadgen.ErrInvalid) {
					return usageError{err}
				}
				return fmt.Errorf("loadgen against %s (flag --server or CBDASH_SERVER): %w", o.Server, err)
			}
			if o.JSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	o.bind(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&o.AgentToken, "agent-token", "", "agent token for any service (env CBDASH_AGENT_TOKEN)")
	f.StringSliceVar(&o.AgentServers, "agent-servers", nil, "base URLs of the collectors the agents connect to, comma-separated, instance i to the (i mod n)th (default: --server; transitions are timed on --server)")
	f.StringVar(&o.Service, "service", "loadgen", "name of the simulated service")
	f.IntVar(&o.Instances, "instances", 1000, "simulated agents")
	f.IntVar(&o.Breakers, "breakers", 20, "breakers per agent")
	f.DurationVar(&o.Interval, "interval", time.Second, "window report period")
	f.DurationVar(&o.Duration, "duration", 30*time.Second, "how long to measure once every agent is connected")
	f.DurationVar(&o.TransitionEvery, "transition-every", 10*time.Second, "how often, on average, each agent flips a breaker")
	f.IntVar(&o.DialConcurrency, "dial-concurrency", 50, "concurrent websocket dials")
	f.BoolVar(&o.JSON, "json", false, "print the result as JSON")
	f.StringVar(&o.MetricsToken, "metrics-token", "", "bearer token of the server's /metrics (serve --metrics-token), scraped for its CPU and memory")
	f.StringVar(&o.DB, "db", "", "the server's SQLite file, when on this machine: its growth is measured (read-only)")
	return cmd
}

// dbSize returns a reader of the bytes in use in the SQLite file path
// (pages minus free pages, through the WAL: what the server has
// committed) and of the history's parts (SQLite's dbstat: the pages of
// the tables and their indexes), opened read-only; nil for "".
func dbSize(path string) func(context.Context) (map[string]int64, error) {
	if path == "" {
		return nil
	}
	return func(ctx context.Context) (map[string]int64, error) {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
		if err != nil {
			return nil, err
		}
		defer db.Close()
		var pages, free, size int64
		for _, q := range []struct {
			pragma string
			v      *int64
		}{{"page_count", &pages}, {"freelist_count", &free}, {"page_size", &size}} {
			if err := db.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.v); err != nil {
				return nil, fmt.Errorf("database %s: PRAGMA %s: %w", path, q.pragma, err)
			}
		}
		out := map[string]int64{"total": (pages - free) * size}
		rows, err := db.QueryContext(ctx, `SELECT name, SUM(pgsize - unused) FROM dbstat GROUP BY name`)
		if err != nil {
			return out, nil // no dbstat in this build: the total only
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n int64
			if rows.Scan(&name, &n) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(name, "windows_second"):
				out["seconds"] += n
			case strings.HasPrefix(name, "instance_minutes"):
				out["instance_minutes"] += n
			case strings.HasPrefix(name, "transitions"):
				out["transitions"] += n
			}
		}
		return out, rows.Err()
	}
}
