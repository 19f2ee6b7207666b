// Command cbdash is the cbdash server and its command line: `cbdash serve`
// runs the collector and the dashboard, `cbdash demo` runs them with a
// simulated fleet, and status, trip, release, reset, token and user talk to
// a running server. Flags are parsed here and only here; every other
// package takes a config struct.
package main

import (
	"context"
	"os"

	"github.com/cbdash/cbdash/internal/clock"
)

// main creates the server's one clock (see package clock) and runs.
func main() {
	os.Exit(run(context.Background(), clock.System(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
