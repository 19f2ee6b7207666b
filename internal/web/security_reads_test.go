package web_test

// The security regression suite, reads (issue 27, found by a review of
// item 1): a client that sends GETs for large answers and never reads
// them kept each answer in the server's memory until --write-timeout
// (200 such sockets on /api/v1/breakers at 4,000 dependencies: 1.1 GB).
// The reads being answered are capped per client address and in total.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestSecurityReadsThatAreNotReadAreCapped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := newLimitedHarness(t, web.Config{Anonymous: true, Registerer: reg, Reads: web.ReadLimits{PerAddress: 2, Total: 3},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, collector.Limits{MaxDependencies: 20000, MaxDependenciesPerToken: 15000})
	// 8,000 breakers: /api/v1/breakers (about 8 MB) is then larger than
	// what the kernel takes for a client that does not read (a send buffer
	// grows to 4 MB here, net.ipv4.tcp_wmem), so its handler waits.
	for i := range 8 {
		if status, body := h.helloIngest(h.stack.AgentToken, wideHello(fmt.Sprintf("big%d", i), "i-1", protocol.MaxBreakersPerHello)); status != http.StatusOK {
			t.Fatalf("ingest = %d %s", status, body)
		}
	}
	gauge := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metrics:
			for _, m := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
					}
					if !found {
						continue metrics
					}
				}
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	// hold asks for /api/v1/breakers as client address from (through the
	// trusted loopback proxy) on a socket that never reads, and waits
	// until the server is answering it.
	held := 0
	hold := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{Control: smallReceiveBuffer, Timeout: 10 * time.Second}
		conn, err := d.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "GET /api/v1/breakers HTTP/1.1\r\nHost: cbdash\r\nX-Forwarded-For: %s\r\n\r\n", from)
		held++
		eventually.True(t, fmt.Sprintf("%d reads being answered", held), func() bool { return gauge("cbdash_reads_in_flight") == float64(held) })
		return conn
	}
	get := func(from, path string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+path, nil)
		req.Header.Set("X-Forwarded-For", from)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header
	}

	a := hold("198.51.100.1")
	hold("198.51.100.1")
	status, body, hdr := get("198.51.100.1", "/api/v1/breakers")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "--max-reads-per-address") || hdr.Get("Retry-After") != "1" {
		t.Fatalf("a third read of one address = %d %q (Retry-After %q), want 503 naming --max-reads-per-address, Retry-After 1", status, body, hdr.Get("Retry-After"))
	}
	// Probes are not counted, nor are other addresses' reads.
	if status, body, _ := get("198.51.100.1", "/healthz"); status != http.StatusOK {
		t.Errorf("/healthz of the address at its cap = %d %s", status, body)
	}
	if status, body, _ := get("198.51.100.2", "/api/v1/breakers"); status != http.StatusOK {
		t.Errorf("a read of another address = %d %.200s", status, body)
	}
	hold("198.51.100.2")
	if status, body, _ := get("198.51.100.3", "/"); status != http.StatusServiceUnavailable || !strings.Contains(body, "--max-reads") {
		t.Errorf("a read while the server answers --max-reads = %d %.200s, want 503", status, body)
	}
	if got := gauge("cbdash_reads_refused_total", "limit", "address"); got != 1 {
		t.Errorf("cbdash_reads_refused_total{limit=address} = %v, want 1", got)
	}
	if got := gauge("cbdash_reads_refused_total", "limit", "total"); got != 1 {
		t.Errorf("cbdash_reads_refused_total{limit=total} = %v, want 1", got)
	}
	// A client that reads its answer after all gives its slot back.
	go io.Copy(io.Discard, bufio.NewReader(a))
	held--
	// Reading about 8 MB through a small receive buffer: slow, beside
	// CPU hogs under the race detector, well past eventually.Timeout.
	eventually.Within(t, 2*time.Minute, "the read that was read gives its slot back", func() bool { return gauge("cbdash_reads_in_flight") == float64(held) })
	if status, body, _ := get("198.51.100.1", "/api/v1/breakers"); status != http.StatusOK {
		t.Errorf("a read of the first address once one of its answers was read = %d %.200s", status, body)
	}
}
