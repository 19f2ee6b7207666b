package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// declares reports whether h declares a breaker called name.
func declares(h protocol.Hello, name string) bool {
	return slices.ContainsFunc(h.Breakers, func(c protocol.BreakerConfig) bool { return c.Name == name })
}

func (f *fixture) newBreaker(t *testing.T, name string) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(name, breaker.Config{Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Register(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// admitted returns the calls of breaker name the collector has stored.
func (f *fixture) admitted(name string) int64 {
	c, _ := f.col.sum(name)
	return c.Admitted
}

func TestUnregisterSendsTheLastReportThenAHelloWithoutTheBreaker(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ledger := f.newBreaker(t, "ledger")
	calls(ledger, 3, false)
	if err := f.agent.Unregister(ledger); err != nil {
		t.Fatal(err)
	}
	// No report tick: the last report goes out at once.
	waitFor(t, 5*time.Second, "the last report of ledger", func() bool { return f.admitted("ledger") == 3 })
	waitFor(t, 5*time.Second, "a hello without ledger", func() bool {
		h := f.col.lastHello()
		return !declares(h, "ledger") && declares(h, "payments")
	})

	calls(ledger, 2, false) // no longer reported
	calls(f.b, 1, false)
	f.tick()
	waitFor(t, 5*time.Second, "the report of payments", func() bool { return f.admitted("payments") == 1 })
	f.close(t)
	if got := f.admitted("ledger"); got != 3 {
		t.Fatalf("stored %d calls of ledger, want the 3 made before Unregister", got)
	}
	if errs := f.col.failures(); len(errs) > 0 {
		t.Fatalf("the collector refused input: %v", errs)
	}
	if d := f.agent.Stats().Dropped; !d.IsZero() {
		t.Fatalf("dropped %+v, want nothing", d)
	}
}

func TestUnregisterKeepsDeclaringTheBreakerUntilItsReportsAreAcknowledged(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ledger := f.newBreaker(t, "ledger")
	waitFor(t, 5*time.Second, "the hello declaring ledger", func() bool { return declares(f.col.lastHello(), "ledger") })
	f.col.stop()
	calls(ledger, 3, false)
	if err := f.agent.Unregister(ledger); err != nil {
		t.Fatal(err)
	}
	f.col.restart()
	waitFor(t, 5*time.Second, "the last report of ledger, after the restart", func() bool { return f.admitted("ledger") == 3 })
	waitFor(t, 5*time.Second, "a hello without ledger", func() bool { return !declares(f.col.lastHello(), "ledger") })
	if errs := f.col.failures(); len(errs) > 0 {
		t.Fatalf("the collector refused input: %v (a report of a breaker its hello did not declare?)", errs)
	}
}

func TestABreakerRegisteredAgainGoesOnFromItsLastReport(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ledger := f.newBreaker(t, "ledger")
	calls(ledger, 3, false)
	if err := f.agent.Unregister(ledger); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the last report of ledger", func() bool { return f.admitted("ledger") == 3 })
	calls(ledger, 2, false)
	if err := f.agent.Register(ledger); err != nil {
		t.Fatal(err)
	}
	f.tick()
	f.close(t)
	if got := f.admitted("ledger"); got != 5 {
		t.Fatalf("stored %d calls of ledger, want its 5 calls once each", got)
	}
	if errs := f.col.failures(); len(errs) > 0 {
		t.Fatalf("the collector refused input: %v", errs)
	}
}

func TestANewBreakerMayTakeTheNameOfOneJustUnregistered(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	old := f.newBreaker(t, "ledger")
	calls(old, 3, false)
	if err := f.agent.Unregister(old); err != nil {
		t.Fatal(err)
	}
	renewed := f.newBreaker(t, "ledger") // while the old one's last report may still be on its way
	calls(renewed, 2, false)
	f.tick()
	f.close(t)
	if got := f.admitted("ledger"); got != 5 {
		t.Fatalf("stored %d calls under ledger, want 3+2", got)
	}
	if errs := f.col.failures(); len(errs) > 0 {
		t.Fatalf("the collector refused input: %v (ledger declared twice?)", errs)
	}
}

func TestUnregisterErrors(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	stranger, err := breaker.New("payments", breaker.Config{}) // the name of a registered breaker
	if err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Unregister(stranger); !errors.Is(err, agent.ErrNotRegistered) {
		t.Fatalf("Unregister of another breaker of a registered name = %v, want ErrNotRegistered", err)
	}
	if err := f.agent.Unregister(f.b); err != nil {
		t.Fatal(err)
	}
	if err := f.agent.Unregister(f.b); !errors.Is(err, agent.ErrNotRegistered) {
		t.Fatalf("second Unregister = %v, want ErrNotRegistered", err)
	}
	f.close(t)
	if err := f.agent.Unregister(f.b); !errors.Is(err, agent.ErrClosed) {
		t.Fatalf("Unregister after Close = %v, want ErrClosed", err)
	}
}

// The per-host breakers of a Transport come and go with the agent: every
// call is reported once under its host's name, whichever breaker of that
// name counted it, and the collector never refuses a batch.
func TestTransportEvictionsUnregisterFromTheAgent(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var registerErrs []error
	tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{
		Config: breaker.Config{Clock: f.clock}, MaxBreakers: 2,
		BreakerFor: func(r *http.Request) string { return r.URL.Query().Get("h") },
		OnNew: func(b *breaker.Breaker) {
			if err := f.agent.Register(b); err != nil {
				registerErrs = append(registerErrs, err)
			}
		},
		OnEvict: func(b *breaker.Breaker) {
			if err := f.agent.Unregister(b); err != nil {
				registerErrs = append(registerErrs, err)
			}
		},
	})
	want := map[string]int64{}
	for i := range 30 {
		host := []string{"inventory", "pricing", "search"}[i%3]
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/?h="+host, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want[host]++
		if i%4 == 0 {
			f.tick()
		}
	}
	f.close(t)
	if len(registerErrs) > 0 {
		t.Fatalf("Register/Unregister failed: %v", registerErrs)
	}
	if s := tr.Stats(); s.BoundEvictions < 20 {
		t.Fatalf("transport stats %+v: three hosts through a bound of 2 should evict on almost every request", s)
	}
	for host, n := range want {
		if got := f.admitted(host); got != n {
			t.Errorf("stored %d calls of %s, want %d", got, host, n)
		}
	}
	if errs := f.col.failures(); len(errs) > 0 {
		t.Fatalf("the collector refused input: %v", errs)
	}
	if d := f.agent.Stats().Dropped; !d.IsZero() {
		t.Fatalf("dropped %+v, want nothing", d)
	}
}
