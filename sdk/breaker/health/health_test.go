package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/breaker/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("down")

func newBreaker(t *testing.T, name string, clk *breakertest.Clock, ramp time.Duration) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(name, breaker.Config{MinimumCalls: 1, OpenDuration: time.Minute, RampDuration: ramp, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func trip(b *breaker.Breaker) {
	_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
}

// get asks the handler over a real HTTP server on loopback.
func get(t *testing.T, srv *httptest.Server) (int, health.Report, http.Header) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r health.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r, resp.Header
}

// The load-balancer trap: an open breaker of a non-critical dependency
// reports the service degraded with 200 (which breaker, since when), never
// unhealthy; only a critical breaker that rejects calls makes it 503.
func TestOnlyCriticalBreakersFailReadiness(t *testing.T) {
	clk := breakertest.NewEpochClock()
	recs := newBreaker(t, "recommendations", clk, 0)
	db := newBreaker(t, "orders-db", clk, 0)
	h := health.New()
	if err := h.Add(recs, health.NonCritical); err != nil {
		t.Fatal(err)
	}
	if err := h.Add(db, health.Critical); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/readyz", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	code, r, hdr := get(t, srv)
	if code != http.StatusOK || r.Status != health.StatusOK || len(r.Degraded) != 0 || len(r.Failing) != 0 {
		t.Fatalf("all closed: %d %+v, want 200 ok", code, r)
	}
	if hdr.Get("Content-Type") != "application/json" || hdr.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", hdr)
	}
	if len(r.Breakers) != 2 || r.Breakers[0].Name != "recommendations" || !r.Breakers[1].Critical || r.Breakers[0].Critical {
		t.Errorf("breakers %+v: want both, in the order added, with their criticality", r.Breakers)
	}

	clk.Advance(3 * time.Second)
	trippedAt := clk.Now()
	trip(recs)
	clk.Advance(time.Second)
	code, r, _ = get(t, srv)
	if code != http.StatusOK || r.Status != health.StatusDegraded || !slices.Equal(r.Degraded, []string{"recommendations"}) || len(r.Failing) != 0 {
		t.Fatalf("non-critical open: %d %+v, want 200 degraded naming recommendations", code, r)
	}
	if b := r.Breakers[0]; b.State != "open" || !b.Since.Equal(trippedAt) {
		t.Errorf("recommendations %+v: want open since %v", b, trippedAt)
	}

	trip(db)
	code, r, _ = get(t, srv)
	if code != http.StatusServiceUnavailable || r.Status != health.StatusUnhealthy || !slices.Equal(r.Failing, []string{"orders-db"}) {
		t.Fatalf("critical open: %d %+v, want 503 unhealthy naming orders-db", code, r)
	}

	// Half-open still rejects all but its probes: still failing.
	clk.Advance(time.Minute)
	if code, r, _ = get(t, srv); code != http.StatusServiceUnavailable || r.Breakers[1].State != "half_open" {
		t.Fatalf("critical half-open: %d %+v, want 503", code, r)
	}
	// An operator holding the critical one closed makes it serve again.
	if _, err := db.Apply(breaker.Command{Action: breaker.ActionForceClosed}); err != nil {
		t.Fatal(err)
	}
	if code, r, _ = get(t, srv); code != http.StatusOK || r.Status != health.StatusDegraded || len(r.Failing) != 0 {
		t.Fatalf("critical forced closed, non-critical half-open: %d %+v, want 200 degraded", code, r)
	}
}

// A breaker ramping up after a recovery admits calls: degraded (with its
// share), even when critical, never failing.
func TestARampIsDegraded(t *testing.T) {
	clk := breakertest.NewEpochClock()
	db := newBreaker(t, "orders-db", clk, 10*time.Second)
	h := health.New()
	if err := h.Add(db, health.Critical); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	trip(db)
	clk.Advance(time.Minute)
	if err := db.Execute(context.Background(), func(context.Context) error { return nil }); err != nil { // the probe closes it
		t.Fatal(err)
	}
	clk.Advance(2500 * time.Millisecond)
	code, r, _ := get(t, srv)
	if code != http.StatusOK || r.Status != health.StatusDegraded || r.Breakers[0].Share != 0.25 || r.Breakers[0].State != "closed" {
		t.Fatalf("ramping: %d %+v, want 200 degraded, closed at share 0.25", code, r)
	}
	clk.Advance(10 * time.Second)
	if code, r, _ = get(t, srv); code != http.StatusOK || r.Status != health.StatusOK {
		t.Fatalf("after the ramp: %d %+v, want 200 ok", code, r)
	}
}

func TestMethodsAndDuplicates(t *testing.T) {
	clk := breakertest.NewEpochClock()
	b := newBreaker(t, "a", clk, 0)
	h := health.New()
	if err := h.Add(b, health.NonCritical); err != nil {
		t.Fatal(err)
	}
	if err := h.Add(newBreaker(t, "a", clk, 0), health.Critical); !errors.Is(err, health.ErrDuplicate) {
		t.Errorf("same name twice: %v, want ErrDuplicate", err)
	}
	if err := h.Add(nil, health.Critical); err == nil {
		t.Error("nil breaker accepted")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	req, _ := http.NewRequest(http.MethodHead, srv.URL, nil)
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD: %d, want 200", resp.StatusCode)
	}
	// An empty handler is ok.
	if r := health.New().Report(); r.Status != health.StatusOK || r.Breakers == nil {
		t.Errorf("empty: %+v", r)
	}
}
