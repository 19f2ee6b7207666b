package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// newTestPipeline is a pipeline over live state on a virtual clock, with
// the collector's default limits, for its parts that need no store (the
// quotas).
func newTestPipeline(tb testing.TB) (*Pipeline, func() time.Time) {
	tb.Helper()
	clk := clocktest.Virtual()
	var lim Limits
	lim.SetDefaults()
	p, err := New(Config{Live: live.New(live.Config{Now: clk.Now, StaleAfter: 15 * time.Second, GoneAfter: 10 * time.Minute}),
		Now: clk.Now, Limits: lim, StaleAfter: 15 * time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	return p, clk.Now
}

// BenchmarkAdmitLimits: the quota check of one hello (20 breakers, known
// dependencies) of an instance of a "*" token that has 5,000 instances
// of one service: what every websocket hello and changed HTTP hello pays.
//
//	go test -run '^$' -bench AdmitLimits -benchmem ./internal/ingest/
func BenchmarkAdmitLimits(b *testing.B) {
	p, now := newTestPipeline(b)
	started := now().Add(-time.Minute).UnixMilli()
	const n = 5000
	hellos := make([]protocol.Hello, n)
	for i := range hellos {
		hellos[i] = wideHello("svc", fmt.Sprint("i", i), "b", 20, started)
		if rf := p.admitLimits("tok", &hellos[i], now()); rf != nil {
			b.Fatal(rf)
		}
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if rf := p.admitLimits("tok", &hellos[i%n], now()); rf != nil {
			b.Fatal(rf)
		}
		i++
	}
}

// TestQuotaCountsShareTheBreakerLists: what the quotas keep of each
// instance is the breaker list live state shares among the instances of
// a service (sharedLists), not a list per instance.
func TestQuotaCountsShareTheBreakerLists(t *testing.T) {
	p, now := newTestPipeline(t)
	started := now().Add(-time.Minute).UnixMilli()
	for _, inst := range []string{"i1", "i2"} {
		// As a handshake admits and registers a hello.
		hello := rawHello(inst, started)
		if rf := p.admitLimits("tok", &hello, now()); rf != nil {
			t.Fatal(rf)
		}
		p.live.Hello(&hello, 0, nil, now(), nil)
	}
	u := p.tokens
	u.mu.Lock()
	defer u.mu.Unlock()
	svc := u.bySvc["api"]
	a, b := svc.instances[live.Key{Service: "api", Instance: "i1"}].breakers, svc.instances[live.Key{Service: "api", Instance: "i2"}].breakers
	// A line's configuration is its entry in the instance's last hello.
	d, _ := p.live.Dependency(cbdash.DependencyKey{Service: "api", Breaker: a[0].Name})
	var kept *protocol.BreakerConfig
	for _, line := range d.PerInstance {
		if line.Instance == "i2" {
			kept = line.Config
		}
	}
	if len(a) != 2 || len(b) != 2 || &a[0] != &b[0] || &a[0] != kept {
		t.Fatal("the quotas keep a breaker list of their own per instance")
	}
}
