package connlimit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
)

// accepting serves l: every connection it returns is sent on the channel
// (and closed when the test ends).
func accepting(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	out := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(out)
				return
			}
			t.Cleanup(func() { c.Close() })
			out <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return out
}

// dialFrom dials addr from the loopback address from (127.0.0.x).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reads c until it ends; it fails the test if c is still
// open after 10 s (a generous bound: a refused connection ends at once).
func closedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection from %s is still open after 10 s", c.LocalAddr())
	}
}

// refused dials addr from from and checks the connection is closed at
// once (the dial itself may see the reset).
func refused(t *testing.T, from, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial from %s: %v, want a connection or a reset", from, err)
		}
		return
	}
	defer c.Close()
	closedByPeer(t, c)
}

// accepted waits for the listener to hand a connection to the server.
func accepted(t *testing.T, conns <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted within 10 s")
		return nil
	}
}

func TestCapsPerAddressAndInTotalWithoutBlockingAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := Wrap(ln, Config{PerAddress: 2, Total: 3, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	conns := accepting(t, l)
	addr := ln.Addr().String()

	dialFrom(t, "127.0.0.1", addr)
	a1 := accepted(t, conns)
	dialFrom(t, "127.0.0.1", addr)
	accepted(t, conns)
	// The third from 127.0.0.1 is over its address's cap: closed, and the
	// next from another address is accepted behind it (Accept did not
	// wait for a slot of 127.0.0.1).
	refused(t, "127.0.0.1", addr)
	dialFrom(t, "127.0.0.2", addr)
	if c := accepted(t, conns); !strings.HasPrefix(c.RemoteAddr().String(), "127.0.0.2:") {
		t.Fatalf("accepted %s, want the connection from 127.0.0.2", c.RemoteAddr())
	}
	// The server is at its total: 127.0.0.3 is refused too.
	refused(t, "127.0.0.3", addr)
	if n := l.Open(); n != 3 {
		t.Errorf("Open() = %d, want 3", n)
	}
	// A closed connection gives its slot back, once (Close twice).
	a1.Close()
	a1.Close()
	dialFrom(t, "127.0.0.1", addr)
	accepted(t, conns)
	refused(t, "127.0.0.1", addr) // over both caps: counted over the total

	got := gather(t, reg)
	for series, want := range map[string]float64{
		`cbdash_connections_refused_total{limit="address"}`: 1,
		`cbdash_connections_refused_total{limit="total"}`:   2,
		`cbdash_connections_open`:                           3,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
}

func TestExemptAddressesCountOnlyInTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Wrap(ln, Config{PerAddress: 1, Total: 3, Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	conns := accepting(t, l)
	for range 3 {
		dialFrom(t, "127.0.0.1", ln.Addr().String())
		accepted(t, conns)
	}
	refused(t, "127.0.0.1", ln.Addr().String())
}

func TestAcceptedTCPConnectionsKeepTheirMethods(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Wrap(ln, Config{PerAddress: 1, Total: 1})
	if err != nil {
		t.Fatal(err)
	}
	conns := accepting(t, l)
	dialFrom(t, "127.0.0.1", ln.Addr().String())
	c := accepted(t, conns)
	// The agents' hijacked sockets read through the file descriptor
	// (internal/collector/hijack.go); net/http half-closes with CloseWrite.
	if _, ok := c.(syscall.Conn); !ok {
		t.Error("an accepted connection is not a syscall.Conn")
	}
	if _, ok := c.(interface{ CloseWrite() error }); !ok {
		t.Error("an accepted connection has no CloseWrite")
	}
}

func TestIPv6CountsPerSlash64(t *testing.T) {
	l := &Listener{}
	a, _ := l.keyOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 1})
	b, _ := l.keyOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9"), Port: 2})
	c, _ := l.keyOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 3})
	if a != b || a == c {
		t.Errorf("keys %v %v %v: want the first two equal (one /64), the third apart", a, b, c)
	}
	v4, _ := l.keyOf(&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 4})
	if v4 != netip.MustParsePrefix("192.0.2.1/32") {
		t.Errorf("an IPv4-mapped address counts as %v, want 192.0.2.1/32", v4)
	}
}

func TestWrapRefusesCapsThatAreNotPositive(t *testing.T) {
	for _, cfg := range []Config{{PerAddress: 0, Total: 1}, {PerAddress: 1, Total: -1}} {
		if _, err := Wrap(nil, cfg); err == nil {
			t.Errorf("Wrap(%+v) = nil error", cfg)
		}
	}
}

// gather reads reg's counters and gauges as name{label="value"} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// warnings is a slog.Handler that keeps the refusal counts of the
// warnings logged.
type warnings struct {
	mu     sync.Mutex
	counts []int // over_the_address_cap + over_the_total_cap, one per warning
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	n := 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "over_the_address_cap" || a.Key == "over_the_total_cap" {
			n += int(a.Value.Int64())
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts = append(w.counts, n)
	return nil
}

// logged returns the counts of the warnings so far and their sum.
func (w *warnings) logged() ([]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := 0
	for _, n := range w.counts {
		sum += n
	}
	return slices.Clone(w.counts), sum
}

// TestHeldBackRefusalsAreLoggedOnceTheIntervalHasPassed: a burst of
// refusals within LogEvery gives a warning for the first at once and one
// for the rest once LogEvery has passed, with no later refusal needed to
// flush it (a reviewer saw a burst of 31 logged as 1); the counts of the
// warnings add up to the refusals.
func TestHeldBackRefusalsAreLoggedOnceTheIntervalHasPassed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.Virtual()
	reg := prometheus.NewRegistry()
	w := &warnings{}
	l, err := Wrap(ln, Config{PerAddress: 1, Total: 100, Registerer: reg, Logger: slog.New(w), Clock: clk, LogEvery: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conns := accepting(t, l)
	addr := ln.Addr().String()
	dialFrom(t, "127.0.0.1", addr)
	accepted(t, conns)

	refusedCount := func() int {
		return int(gather(t, reg)[`cbdash_connections_refused_total{limit="address"}`])
	}
	burst := func(n int) {
		t.Helper()
		before := refusedCount()
		for range n {
			refused(t, "127.0.0.1", addr)
		}
		eventually.True(t, "the listener counts the burst's refusals", func() bool { return refusedCount() == before+n })
	}

	const n = 31
	burst(n)
	// The first at once; the 30 others are held back, the clock not moved.
	eventually.True(t, "the first refusal is logged", func() bool { _, sum := w.logged(); return sum >= 1 })
	if counts, _ := w.logged(); !slices.Equal(counts, []int{1}) {
		t.Fatalf("warnings before LogEvery has passed: %v, want one of 1", counts)
	}
	clk.Advance(9 * time.Second)
	if counts, _ := w.logged(); !slices.Equal(counts, []int{1}) {
		t.Fatalf("warnings 9 s after the first: %v, want one of 1", counts)
	}
	clk.Advance(time.Second) // LogEvery after the first: no refusal since, the rest is logged
	if counts, sum := w.logged(); len(counts) != 2 || sum != n {
		t.Fatalf("warnings once LogEvery has passed: %v, want 2 adding up to %d", counts, n)
	}

	// Another burst right after the warning: all held back, then logged
	// together; nothing more is logged without refusals.
	burst(5)
	if counts, _ := w.logged(); len(counts) != 2 {
		t.Fatalf("warnings within LogEvery of the last: %v, want none more", counts)
	}
	clk.Advance(10 * time.Second)
	if counts, sum := w.logged(); len(counts) != 3 || sum != n+5 {
		t.Fatalf("warnings after the second burst: %v, want 3 adding up to %d", counts, n+5)
	}
	clk.Advance(time.Hour)
	if counts, _ := w.logged(); len(counts) != 3 {
		t.Fatalf("warnings an hour later, no refusals since: %v, want 3", counts)
	}
	if p := clk.Pending(); p != 0 {
		t.Errorf("%d timers left armed with nothing held back", p)
	}

	// Held back when the listener closes: logged then.
	clk.Advance(time.Second)
	burst(1) // LogEvery after the last: logged at once
	eventually.True(t, "the refusal is logged", func() bool { counts, _ := w.logged(); return len(counts) == 4 })
	burst(2) // held back
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if counts, sum := w.logged(); len(counts) != 5 || sum != n+5+3 {
		t.Fatalf("warnings after the listener closed: %v, want 5 adding up to %d", counts, n+5+3)
	}
	if got := refusedCount(); got != n+5+3 {
		t.Errorf("cbdash_connections_refused_total{limit=\"address\"} = %d, want %d", got, n+5+3)
	}
}
