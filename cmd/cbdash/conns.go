package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/connlimit"
)

// connOptions are the HTTP server's timeouts and connection caps: what
// keeps a client that opens connections and holds them (idle keep-alive
// connections, a header sent a byte at a time) from taking the server
// from everyone else. 0 in a field = its default (connDefaults).
//
// The timeouts are those of plain requests. The connections that live
// long on purpose have their own liveness instead: agent and dashboard
// websockets (net/http clears a connection's deadlines when it is
// hijacked; the agent session has its hello timeout and acks, /live its
// write timeout) and the event stream (collector.ServeEvents clears
// them and bounds each write).
type connOptions struct {
	ReadHeaderTimeout time.Duration // --read-header-timeout: a request's header, from when the server starts reading it
	ReadTimeout       time.Duration // --read-timeout: a whole request, header and body (not how long its handler runs)
	WriteTimeout      time.Duration // --write-timeout: from the end of a request's header to the end of its answer
	IdleTimeout       time.Duration // --idle-timeout: a keep-alive connection between two requests
	PerAddress        int           // --max-connections-per-address: open connections of one client address (IPv6: one /64)
	Total             int           // --max-connections: open connections of the server
	// totalFlag is --max-connections (nil when not bound): whether the
	// operator set it (flag or environment), which listen's log says.
	totalFlag *pflag.Flag
}

// connDefaults are the defaults of connOptions.
var connDefaults = connOptions{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       time.Minute,
	WriteTimeout:      2 * time.Minute,
	IdleTimeout:       time.Minute,
	PerAddress:        2000,
	Total:             20000,
}

// fdReserve is how many file descriptors --max-connections leaves to the
// rest of the server (the database, webhooks, pull sources, OTLP, logs).
const fdReserve = 256

func (c *connOptions) bind(fs *pflag.FlagSet) {
	d := connDefaults
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "the longest a client may take to send a request's header (a connection that sends nothing, or a header a byte at a time, is closed then)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", d.ReadTimeout, "the longest a client may take to send a whole request, header and body (not websockets or the event stream, which have their own liveness)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", d.WriteTimeout, "the longest from the end of a request's header to the end of its answer (not websockets or the event stream)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", d.IdleTimeout, "how long a keep-alive connection may wait for its next request")
	fs.IntVar(&c.PerAddress, "max-connections-per-address", d.PerAddress, "the most connections one client address (IPv6: one /64) may hold open, of every kind (agents, dashboards, API); one more is closed at once. A --trusted-proxy counts only in --max-connections")
	fs.IntVar(&c.Total, "max-connections", d.Total, "the most connections the server holds open; one more is closed at once (lowered to the open-file limit less 256 when that is lower)")
	c.totalFlag = fs.Lookup("max-connections")
}

// withDefaults is c with every zero field at its default.
func (c connOptions) withDefaults() connOptions {
	d := connDefaults
	for _, f := range []struct{ v, d *time.Duration }{{&c.ReadHeaderTimeout, &d.ReadHeaderTimeout}, {&c.ReadTimeout, &d.ReadTimeout},
		{&c.WriteTimeout, &d.WriteTimeout}, {&c.IdleTimeout, &d.IdleTimeout}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if c.PerAddress == 0 {
		c.PerAddress = d.PerAddress
	}
	if c.Total == 0 {
		c.Total = d.Total
	}
	return c
}

// validate names the flag of a bad value.
func (c connOptions) validate() error {
	for flag, v := range map[string]time.Duration{"--read-header-timeout": c.ReadHeaderTimeout, "--read-timeout": c.ReadTimeout,
		"--write-timeout": c.WriteTimeout, "--idle-timeout": c.IdleTimeout} {
		if v < 0 {
			return usageError{fmt.Errorf("%s must not be negative (got %v; 0 = the default)", flag, v)}
		}
	}
	for flag, v := range map[string]int{"--max-connections-per-address": c.PerAddress, "--max-connections": c.Total} {
		if v < 0 {
			return usageError{fmt.Errorf("%s must not be negative (got %d; 0 = the default)", flag, v)}
		}
	}
	if d := c.withDefaults(); d.ReadHeaderTimeout > d.ReadTimeout {
		return usageError{fmt.Errorf("--read-header-timeout (%v) must not be longer than --read-timeout (%v), which covers the header too", d.ReadHeaderTimeout, d.ReadTimeout)}
	}
	return nil
}

// httpServer is the HTTP server of h with c's timeouts.
func (c connOptions) httpServer(h http.Handler, log *slog.Logger) *http.Server {
	c = c.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// listen wraps ln in c's connection caps (proxies, the trusted proxies,
// are capped only in total), registering their metrics on reg. The total
// is lowered to the process's open-file limit less fdReserve when that
// is lower (past it accept fails for everyone): see fitTotal.
func (c connOptions) listen(ln net.Listener, proxies []netip.Prefix, reg prometheus.Registerer, log *slog.Logger, clk clock.Clock) (*connlimit.Listener, error) {
	c = c.withDefaults()
	userSet := c.totalFlag != nil && c.totalFlag.Changed
	total, level, lowered := fitTotal(c.Total, userSet, openFileLimit())
	if lowered {
		log.Log(context.Background(), level, "--max-connections is above what the open-file limit allows; lowered (raise the limit, e.g. LimitNOFILE in a systemd unit, to keep it)",
			"max_connections", c.Total, "open_file_limit", openFileLimit(), "lowered_to", total)
	}
	return connlimit.Wrap(ln, connlimit.Config{PerAddress: c.PerAddress, Total: total, Exempt: proxies,
		Registerer: reg, Logger: log, Clock: clk})
}

// fitTotal is the connection total the server can keep under the
// open-file limit limit (0: unknown, total as is): total, or the limit
// less fdReserve (half the limit when that is small) when that is lower;
// lowered says it was. The lowering is logged at level: a warning when
// the operator set --max-connections (userSet: the flag or its
// variable), debug for the default, which is above many machines' limit
// (nothing the operator asked for is lost; at info it was a line of
// noise at every start).
func fitTotal(total int, userSet bool, limit uint64) (fit int, level slog.Level, lowered bool) {
	if limit == 0 {
		return total, 0, false
	}
	f := limit - fdReserve
	if limit <= 2*fdReserve {
		f = max(limit/2, 1)
	}
	if uint64(total) <= f {
		return total, 0, false
	}
	level = slog.LevelDebug
	if userSet {
		level = slog.LevelWarn
	}
	return int(f), level, true
}
