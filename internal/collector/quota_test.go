package collector

// Quotas per agent token and per service (issue 27, item 3): with the
// default limits, one agent token, limited to one service or for any
// ("*"), cannot fill the collector's limit of dependencies and refuse
// every other service; a hello that declares known dependencies again is
// never refused; the refusals name the quota and are counted.

import (
	"encoding/json"
	"fmt"
	"github.com/cbdash/cbdash/internal/live"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// wideHello is rawHello of service/instance declaring n breakers named
// prefix0..prefix(n-1).
func wideHello(service, instance, prefix string, n int, startedAt int64) protocol.Hello {
	h := rawHello(instance, startedAt)
	h.Service = service
	proto := h.Breakers[0]
	h.Breakers = make([]protocol.BreakerConfig, n)
	for i := range h.Breakers {
		h.Breakers[i] = proto
		h.Breakers[i].Name = prefix + strconv.Itoa(i)
	}
	return h
}

// quotaAnswer sends hello hi on a new connection with token and returns
// the refusal's reason, "" when it was welcomed.
func quotaAnswer(t *testing.T, h *harness, token string, hi protocol.Hello) string {
	t.Helper()
	a := dialRaw(t, h, token)
	defer a.conn.CloseNow()
	a.send(hi)
	typ, data, err := a.next()
	if err != nil {
		t.Fatalf("hello of %s/%s: %v", hi.Service, hi.Instance, err)
	}
	switch typ {
	case protocol.TypeWelcome:
		return ""
	case protocol.TypeError:
		var e protocol.Error
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatal(err)
		}
		if !e.Fatal || e.Retry {
			t.Fatalf("hello of %s/%s: %+v, want a permanent fatal error", hi.Service, hi.Instance, e)
		}
		return e.Reason
	}
	t.Fatalf("hello of %s/%s: got %s %s", hi.Service, hi.Instance, typ, data)
	return ""
}

// refusedCount reads cbdash_collector_agent_refused_total{reason} from
// /metrics (0 when absent).
func refusedCount(t *testing.T, h *harness, reason string) int {
	t.Helper()
	status, body := call(t, "GET", h.srv.URL+"/metrics", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	m := regexp.MustCompile(`(?m)^cbdash_collector_agent_refused_total\{reason="` + regexp.QuoteMeta(reason) + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestQuotasKeepOneTokenFromFillingTheCollector(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil) // the default limits: 10,000 dependencies
	ctx := t.Context()
	started := h.now().Add(-time.Minute).UnixMilli()
	const wide = protocol.MaxBreakersPerHello

	// A token limited to one service sends hellos of new instances, each
	// with a thousand new breakers: 10 of them filled the collector. Its
	// service stops at its quota (1,000 by default).
	filler, err := h.store.CreateAgentToken(ctx, "filler")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 10; i++ {
		reason := quotaAnswer(t, h, filler, wideHello("filler", fmt.Sprint("f", i), fmt.Sprintf("f%d-b", i), wide, started))
		switch {
		case i == 0 && reason != "":
			t.Fatalf("the first hello of the service was refused: %s", reason)
		case i > 0 && !strings.Contains(reason, "one service may have (serve flag --max-dependencies-per-service)"):
			t.Errorf("hello %d of one service's token: %q, want a refusal naming --max-dependencies-per-service", i, reason)
		case i > 0 && !strings.Contains(reason, `service "filler" has 1000 dependencies`):
			t.Errorf("hello %d: %q does not name the service and its dependencies", i, reason)
		}
	}
	// Another service's first hello, another token, is accepted.
	victim, err := h.store.CreateAgentToken(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if reason := quotaAnswer(t, h, victim, wideHello("victim", "v0", "v-b", 10, started)); reason != "" {
		t.Fatalf("another service's first hello after one token's 11: refused: %s", reason)
	}
	// The service's known dependencies are never refused: an instance
	// coming back, a new one, each declaring them again.
	for _, inst := range []string{"f0", "f0-restarted"} {
		if reason := quotaAnswer(t, h, filler, wideHello("filler", inst, "f0-b", wide, started+1)); reason != "" {
			t.Fatalf("%s declaring the service's known dependencies again: refused: %s", inst, reason)
		}
	}

	// A token for any service ("*"): one service stops at its quota, the
	// next service through the same token is accepted...
	star := h.token
	if reason := quotaAnswer(t, h, star, wideHello("s0", "i0", "s0-a", wide, started)); reason != "" {
		t.Fatalf("the first service of a * token: refused: %s", reason)
	}
	if reason := quotaAnswer(t, h, star, wideHello("s0", "i1", "s0-b", 1, started)); !strings.Contains(reason, "--max-dependencies-per-service") {
		t.Fatalf("a * token's service past its quota: %q, want a refusal naming --max-dependencies-per-service", reason)
	}
	// ... up to the token's own quota (half of the collector's limit, 5,000).
	for i := 1; i <= 5; i++ {
		svc := fmt.Sprint("s", i)
		reason := quotaAnswer(t, h, star, wideHello(svc, "i0", svc+"-a", wide, started))
		switch {
		case i < 5 && reason != "":
			t.Fatalf("service %d of a * token: refused: %s", i, reason)
		case i == 5 && !strings.Contains(reason, "one token may have (serve flag --max-dependencies-per-token)"):
			t.Fatalf("service %d of a * token past the token's 5,000: %q, want a refusal naming --max-dependencies-per-token", i, reason)
		case i == 5 && !strings.Contains(reason, "would declare 6000 dependencies"):
			t.Fatalf("the token's refusal %q does not give the count", reason)
		}
	}
	// The * token's known dependencies go on being accepted.
	if reason := quotaAnswer(t, h, star, wideHello("s1", "i1", "s1-a", wide, started)); reason != "" {
		t.Fatalf("another instance of a * token's known service: refused: %s", reason)
	}
	// One token filled neither the collector nor another service's room.
	if n := len(h.col.Dependencies()); n != 1000+10+5000 {
		t.Errorf("the collector holds %d dependencies, want %d", n, 1000+10+5000)
	}
	if reason := quotaAnswer(t, h, victim, wideHello("victim", "v1", "v-c", wide-10, started)); reason != "" {
		t.Fatalf("another service's instance after the * token's: refused: %s", reason)
	}

	// Counted by quota.
	for reason, want := range map[string]int{"service_dependency_limit": 11, "token_dependency_limit": 1, "dependency_limit": 0} {
		if got := refusedCount(t, h, reason); got != want {
			t.Errorf(`cbdash_collector_agent_refused_total{reason=%q} = %d, want %d`, reason, got, want)
		}
	}
}

// TestARestartedServiceTakesItsOfflineInstancesPlaces: at the instance
// quota, a new instance of a service takes the place of one of its
// offline instances (no connection, silent for StaleAfter), which is
// forgotten at once, rather than being refused until the old ones are
// forgotten (GoneAfter, 10 minutes); an instance still connected keeps
// its place.
func TestARestartedServiceTakesItsOfflineInstancesPlaces(t *testing.T) {
	t.Parallel()
	clk := breakertest.NewClock(clocktest.Epoch())
	h := startHarness(t, "", func(c *Config) { c.Clock, c.Limits.MaxInstancesPerService = clk, 2 })
	started := clk.Now().Add(-time.Minute).UnixMilli()
	const full = "instances, the most one service may have (serve flag --max-instances-per-service=2)"
	old := []*rawAgent{dialRaw(t, h, h.token), dialRaw(t, h, h.token)}
	old[0].hello("i1", started)
	old[1].hello("i2", started)
	if reason := quotaAnswer(t, h, h.token, rawHello("i3", started)); !strings.Contains(reason, full) {
		t.Fatalf("a third instance while two are connected: %q, want a refusal with %q", reason, full)
	}
	for i, a := range old {
		a.conn.CloseNow()
		k := instKey{"api", fmt.Sprint("i", i+1)}
		eventually.True(t, "the old instance's session ends", func() bool { return h.col.live.ConnOf(k.key()) == nil })
	}
	// Offline for a moment only: it may be coming back.
	if reason := quotaAnswer(t, h, h.token, rawHello("i3", started)); !strings.Contains(reason, full) {
		t.Fatalf("a new instance a moment after the old ones disconnected: %q, want a refusal", reason)
	}
	clk.Advance(16 * time.Second) // past StaleAfter (15 s)
	restarted := []*rawAgent{dialRaw(t, h, h.token), dialRaw(t, h, h.token)}
	restarted[0].hello("i3", started+1)
	restarted[1].hello("i4", started+1)
	d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ib := range d.PerInstance {
		names = append(names, ib.Instance)
	}
	if strings.Join(names, ",") != "i3,i4" {
		t.Errorf("instances of api/db after the restart: %v, want the new i3 and i4 only (the offline ones forgotten)", names)
	}
	// The new ones are connected: they keep their places.
	if reason := quotaAnswer(t, h, h.token, rawHello("i5", started)); !strings.Contains(reason, full) {
		t.Fatalf("a fifth instance while two are connected: %q, want a refusal", reason)
	}
	if got := refusedCount(t, h, "service_instance_limit"); got != 3 {
		t.Errorf(`cbdash_collector_agent_refused_total{reason="service_instance_limit"} = %d, want 3`, got)
	}
}

// TestForgottenInstancesStopCounting: an instance the collector has
// forgotten (GoneAfter after it went silent and disconnected) no longer
// counts against its token's quota, even for another service (whose new
// instance cannot take its place).
func TestForgottenInstancesStopCounting(t *testing.T) {
	t.Parallel()
	clk := breakertest.NewClock(clocktest.Epoch())
	h := startHarness(t, "", func(c *Config) { c.Clock, c.Limits.MaxInstancesPerToken = clk, 1 })
	started := clk.Now().Add(-time.Minute).UnixMilli()
	a := dialRaw(t, h, h.token)
	a.hello("i1", started)
	a.conn.CloseNow()
	eventually.True(t, "the session ends", func() bool { return h.col.live.ConnOf(live.Key{Service: "api", Instance: "i1"}) == nil })
	other := wideHello("other", "o1", "x", 1, started)
	const full = "instances, the most one token may have (serve flag --max-instances-per-token=1)"
	if reason := quotaAnswer(t, h, h.token, other); !strings.Contains(reason, full) {
		t.Fatalf("another service's instance while api/i1 is known: %q, want a refusal with %q", reason, full)
	}
	clk.Advance(11 * time.Minute) // past GoneAfter (10 min)
	h.col.live.Sweep()
	if reason := quotaAnswer(t, h, h.token, other); reason != "" {
		t.Fatalf("another service's instance once api/i1 is forgotten: refused: %s", reason)
	}
}
