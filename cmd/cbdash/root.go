package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash/internal/clock"
)

// envPrefix is prepended to a flag's upper-cased name (dashes become
// underscores) to find its environment variable: --tls-cert reads
// CBDASH_TLS_CERT. A flag given on the command line wins.
const envPrefix = "CBDASH_"

// envFlags are the flags that may be set from the environment: the
// settings of a deployment and the credentials, not the arguments of one
// command (a stray CBDASH_REASON must not fill in --reason). The README's
// Configuration table lists them; `cbdash --help` lists them all.
var envFlags = []string{
	"addr", "db", "retention-seconds", "retention-minutes", "retention-hours", "retention-transitions",
	"tls-cert", "tls-key", "anonymous", "admin-password", "metrics-token", "log-level", "log-format", "incident-quiet", "incident-share", "incident-include-forced", "quorum", "quorum-probes",
	"trusted-proxy", "secure-cookies", "otlp-endpoint", "otlp-interval", "otlp-header",
	"max-instances-per-token", "max-breakers-per-token", "max-dependencies", "max-connections-per-token",
	"max-instances-per-service", "max-breakers-per-service", "max-dependencies-per-service", "max-dependencies-per-token",
	"max-live-per-session", "max-live-per-address", "max-live", "allow-private-webhooks", "external-url", "ack-delay",
	"max-event-streams-per-session", "max-event-streams-per-address", "max-event-streams", "max-reads-per-address", "max-reads",
	"read-header-timeout", "read-timeout", "write-timeout", "idle-timeout", "max-connections-per-address", "max-connections",
	"server", "token", "timeout", "agent-token", "password",
}

// fromEnv reports whether flag name may be set from the environment
// (envFlags).
func fromEnv(name string) bool { return slices.Contains(envFlags, name) }

// envFlagsText is envFlags as "--addr, --db, ...", wrapped at width
// columns (no name is broken).
func envFlagsText(width int) string {
	var b strings.Builder
	line := 0
	for i, f := range envFlags {
		word := "--" + f
		if i < len(envFlags)-1 {
			word += ","
		}
		if line > 0 && line+1+len(word) > width {
			b.WriteString("\n")
			line = 0
		} else if line > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// run is the whole program: it parses args, runs the command until it
// ends or SIGINT/SIGTERM arrives, and returns the exit status. clk is the
// server's one clock: serve and demo pass it to everything they start.
func run(ctx context.Context, clk clock.Clock, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(clk, getenv, stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "cbdash:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func newRootCmd(clk clock.Clock, getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "cbdash",
		Short: "A live dashboard for the circuit breakers of a fleet of services",
		Long: `cbdash collects what the circuit breakers of your services do (through
the sdk/agent package, the Node agent, or Hystrix and Prometheus sources),
shows it live, keeps its history in a SQLite file or a PostgreSQL database
(--db), and lets operators trip, hold, release and reset breakers.

These flags can also be set with an environment variable, CBDASH_ and the
flag's name in capitals, dashes as underscores (--tls-cert: CBDASH_TLS_CERT);
a flag on the command line wins:
` + envFlagsText(78) + `.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags(), getenv)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newServeCmd(clk),
		newDemoCmd(clk),
		newStatusCmd(clk),
		newHoldCmd("trip", actionForceOpen),
		newHoldCmd("hold-closed", actionForceClosed),
		newCommandCmd("release", "End a hold (force open / force closed), by hold id or on a SERVICE/BREAKER: the breakers return to their automatic state", actionRelease),
		newCommandCmd("reset", "Reset a breaker to closed with an empty window (refused while a hold covers it)", actionReset),
		newHoldsCmd(),
		newDrillsCmd(),
		newDrillCmd(), // schedules.go
		newAlertsCmd(),
		newIncidentsCmd(clk),
		newTuneCmd(),   // tune.go
		newReviewCmd(), // review.go
		newTokenCmd(),
		newUserCmd(),
		newLoadgenCmd(clk),
	)
	return root
}

// flagsFromEnv sets every flag that fromEnv allows and that is not given
// on the command line from its environment variable, if that is set. A
// bad value names the variable.
func flagsFromEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || !fromEnv(f.Name) {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usageError{fmt.Errorf("environment variable %s=%q: %w", envName(f.Name), v, e)}
		}
	})
	return err
}
