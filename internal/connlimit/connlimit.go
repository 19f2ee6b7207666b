// Package connlimit caps the connections a server holds open, per client
// address and in total, at accept time: a listener that wraps the
// server's own and closes a connection over a cap as soon as it is
// accepted, before a byte of it is read, so that one client cannot take
// the process's file descriptors from everyone else (agents, dashboards,
// the API, probes).
//
// A blocking cap (golang.org/x/net/netutil.LimitListener) does not fit:
// it stops accepting while the total is reached, and a per-address cap
// that blocked Accept would stall every other client behind the one over
// its cap. Here Accept never waits for a slot: a connection over a cap is
// closed at once (with a reset, so that the server keeps no TIME_WAIT for
// it) and Accept goes on to the next one. No answer is written: the
// listener sits under TLS, where nothing could be said before a
// handshake, and an answer could block on a client that does not read.
package connlimit

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/clock"
)

// Config configures a Listener.
type Config struct {
	// PerAddress is the most connections one client address may hold
	// open at once (an IPv4 address; an IPv6 /64, which one host commonly
	// owns whole). Must be positive.
	PerAddress int
	// Total is the most connections the listener holds open at once.
	// Must be positive; keep it under the process's open-file limit.
	Total int
	// Exempt are the addresses not capped per address, only in total:
	// reverse proxies, whose one address carries many clients (the
	// server's trusted proxies; the proxy caps its own clients).
	Exempt []netip.Prefix
	// Registerer receives cbdash_connections_open and
	// cbdash_connections_refused_total; nil = not registered.
	Registerer prometheus.Registerer
	// Logger gets a warning when connections are refused, at most one
	// every LogEvery, with the number refused since the last (by cap): a
	// refusal within LogEvery of the last warning is held back and
	// logged by the next one, which comes once LogEvery has passed even
	// if no connection is refused since (or when the listener is
	// closed). nil discards.
	Logger *slog.Logger
	// Clock times those warnings (Now, and AfterFunc for the held-back
	// ones); nil = clock.System().
	Clock clock.Clock
	// LogEvery is the least time between two warnings; 0 = 10 s.
	LogEvery time.Duration
}

// Listener is a net.Listener that caps open connections (see the
// package). A connection it returns gives its slot back when it is
// closed, by the server or by whoever hijacked it (a websocket); the
// connection of a TCP listener keeps every method of *net.TCPConn
// (SyscallConn, CloseWrite, ReadFrom...), so what the server does with
// a *net.TCPConn still works. Safe for concurrent use.
type Listener struct {
	net.Listener
	cfg Config

	mu        sync.Mutex
	total     int
	byAddress map[netip.Prefix]int
	refused   [2]int    // since the last warning, by limit
	lastLog   time.Time // of the last warning
	lastAddr  netip.Addr
	// held is the timer of the warning of refusals held back, nil when
	// none is armed; heldGen tells the armed one from one stopped too
	// late (whose function may already wait for mu).
	held    stopper
	heldGen uint64

	refusedTotal *prometheus.CounterVec
}

// stopper is the timer of Config.Clock's AfterFunc.
type stopper interface{ Stop() bool }

// refusedMsg is the warning of refused connections.
const refusedMsg = "refused connections over the connection caps (closed at accept)"

const (
	limitAddress = iota
	limitTotal
)

var limitNames = [2]string{"address", "total"}

// Wrap caps the connections accepted from ln by cfg. It fails when a cap
// is not positive or the metrics cannot be registered.
func Wrap(ln net.Listener, cfg Config) (*Listener, error) {
	if cfg.PerAddress <= 0 || cfg.Total <= 0 {
		return nil, fmt.Errorf("connlimit: PerAddress (%d) and Total (%d) must be positive", cfg.PerAddress, cfg.Total)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrSystem(cfg.Clock)
	if cfg.LogEvery == 0 {
		cfg.LogEvery = 10 * time.Second
	}
	l := &Listener{Listener: ln, cfg: cfg, byAddress: map[netip.Prefix]int{},
		refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_connections_refused_total",
			Help: "Connections closed as soon as accepted, over a cap, by limit (address: the most of one client address, total: the most of the server).",
		}, []string{"limit"}),
	}
	for _, name := range limitNames {
		l.refusedTotal.WithLabelValues(name) // both series from the start, at 0
	}
	if cfg.Registerer != nil {
		open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cbdash_connections_open",
			Help: "Client connections open (HTTP, agent and dashboard websockets, event streams), as the connection caps count them.",
		}, func() float64 { return float64(l.Open()) })
		for _, c := range []prometheus.Collector{l.refusedTotal, open} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("connlimit: metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Open is the number of connections open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Accept returns the next connection within the caps; it closes every
// connection over a cap on the way, without waiting. Errors are ln's.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, capped := l.keyOf(c.RemoteAddr())
		release, warn := l.take(key, capped)
		if release != nil {
			return wrap(c, release), nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: no TIME_WAIT kept for a refused connection
		}
		_ = c.Close()
		if warn != nil {
			l.cfg.Logger.Warn(refusedMsg, warn...)
		}
	}
}

// keyOf is the address a connection from addr counts against, and
// whether it is capped per address at all.
func (l *Listener) keyOf(addr net.Addr) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Prefix{}, false // not an IP connection (a Unix socket): the total only
	}
	a := ap.Addr().Unmap().WithZone("")
	for _, p := range l.cfg.Exempt {
		if p.Contains(a) {
			return netip.Prefix{}, false
		}
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

// take takes a slot for a connection of key, or counts the refusal and
// returns nil release, with the attributes of a warning to log when one
// is due.
func (l *Listener) take(key netip.Prefix, capped bool) (release func(), warn []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := -1
	switch {
	case l.total >= l.cfg.Total:
		limit = limitTotal
	case capped && l.byAddress[key] >= l.cfg.PerAddress:
		limit = limitAddress
	}
	if limit >= 0 {
		return nil, l.refusedLocked(limit, key.Addr())
	}
	l.total++
	if capped {
		l.byAddress[key]++
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total--
		if capped {
			if l.byAddress[key]--; l.byAddress[key] <= 0 {
				delete(l.byAddress, key)
			}
		}
	}, nil
}

// refusedLocked counts a refusal; it returns the attributes of a warning
// when the last one is old enough (logged by the caller, without l.mu),
// nil otherwise: the refusal is then held back, and a timer logs it once
// the last warning is LogEvery old, unless a refusal logs it before.
func (l *Listener) refusedLocked(limit int, addr netip.Addr) []any {
	l.refusedTotal.WithLabelValues(limitNames[limit]).Inc()
	l.refused[limit]++
	l.lastAddr = addr
	now := l.cfg.Clock.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < l.cfg.LogEvery {
		if l.held == nil {
			l.heldGen++
			gen := l.heldGen
			// At most LogEvery: a clock stepped back holds nothing longer.
			wait := min(l.lastLog.Add(l.cfg.LogEvery).Sub(now), l.cfg.LogEvery)
			l.held = l.cfg.Clock.AfterFunc(wait, func() { l.logHeld(gen) })
		}
		return nil
	}
	return l.warningLocked(now)
}

// logHeld logs the refusals held back, as the timer of generation gen
// (nothing when another has been armed since, or none is left).
func (l *Listener) logHeld(gen uint64) {
	l.mu.Lock()
	if gen != l.heldGen || l.held == nil {
		l.mu.Unlock()
		return
	}
	warn := l.warningLocked(l.cfg.Clock.Now())
	l.mu.Unlock()
	if warn != nil {
		l.cfg.Logger.Warn(refusedMsg, warn...)
	}
}

// Close closes the listener (the connections it returned stay open) and
// logs the refusals held back, if any.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	warn := l.warningLocked(l.cfg.Clock.Now())
	l.mu.Unlock()
	if warn != nil {
		l.cfg.Logger.Warn(refusedMsg, warn...)
	}
	return err
}

// warningLocked returns the attributes of the warning of the refusals
// since the last one and starts counting anew, with no timer armed; nil
// when there are none.
func (l *Listener) warningLocked(now time.Time) []any {
	if l.held != nil {
		l.held.Stop()
		l.held = nil
	}
	if l.refused == [2]int{} {
		return nil
	}
	byAddr, total, last := l.refused[limitAddress], l.refused[limitTotal], l.lastAddr
	l.refused, l.lastLog = [2]int{}, now
	attrs := []any{"over_the_address_cap", byAddr, "over_the_total_cap", total,
		"per_address", l.cfg.PerAddress, "total", l.cfg.Total, "open", l.total}
	if last.IsValid() {
		attrs = append(attrs, "last_address", last.String())
	}
	return attrs
}

// wrap returns c counting against its slot until closed.
func wrap(c net.Conn, release func()) net.Conn {
	r := &releaser{release: release}
	if tc, ok := c.(*net.TCPConn); ok {
		return &tcpConn{TCPConn: tc, r: r}
	}
	return &conn{Conn: c, r: r}
}

// releaser gives a slot back once.
type releaser struct {
	once    sync.Once
	release func()
}

func (r *releaser) done() { r.once.Do(r.release) }

// tcpConn is an accepted TCP connection holding a slot: every method of
// *net.TCPConn, and Close gives the slot back.
type tcpConn struct {
	*net.TCPConn
	r *releaser
}

func (c *tcpConn) Close() error {
	err := c.TCPConn.Close()
	c.r.done()
	return err
}

// conn is any other accepted connection holding a slot.
type conn struct {
	net.Conn
	r *releaser
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.r.done()
	return err
}
