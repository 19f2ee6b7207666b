package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// keeper is a Transport whose breakers are named by the "h" query
// parameter, on a virtual clock, recording what it makes and evicts.
type keeper struct {
	t       *testing.T
	srv     *httptest.Server
	clk     *breakertest.Clock
	tr      *breaker.Transport
	sent    atomic.Int64 // requests that reached the server
	mu      sync.Mutex
	made    []string
	evicted []string
}

func newKeeper(t *testing.T, max int, idle time.Duration, handler http.HandlerFunc) *keeper {
	t.Helper()
	k := &keeper{t: t, clk: breakertest.NewEpochClock()}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.sent.Add(1)
		if handler != nil {
			handler(w, r)
		}
	}))
	t.Cleanup(k.srv.Close)
	cfg := small
	cfg.Clock = k.clk
	k.tr = breaker.NewTransport(k.srv.Client().Transport, breaker.TransportConfig{
		Config: cfg, MaxBreakers: max, IdleTimeout: idle,
		BreakerFor: func(r *http.Request) string { return r.URL.Query().Get("h") },
		OnNew:      func(b *breaker.Breaker) { k.record(&k.made, b) },
		OnEvict:    func(b *breaker.Breaker) { k.record(&k.evicted, b) },
	})
	return k
}

func (k *keeper) record(list *[]string, b *breaker.Breaker) {
	k.mu.Lock()
	defer k.mu.Unlock()
	*list = append(*list, b.Name())
}

func (k *keeper) madeAndEvicted() (made, evicted []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.made), slices.Clone(k.evicted)
}

// get sends a request through the breaker named host.
func (k *keeper) get(host string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, k.srv.URL+"/?h="+host, nil)
	if err != nil {
		k.t.Fatal(err)
	}
	resp, err := k.tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func (k *keeper) mustGet(hosts ...string) {
	k.t.Helper()
	for _, h := range hosts {
		if err := k.get(h); err != nil {
			k.t.Fatalf("GET through %s: %v", h, err)
		}
	}
}

// kept returns the names of the breakers kept now, in the order made.
func (k *keeper) kept() []string {
	var names []string
	for _, b := range k.tr.Breakers() {
		names = append(names, b.Name())
	}
	return names
}

func (k *keeper) breaker(name string) *breaker.Breaker {
	for _, b := range k.tr.Breakers() {
		if b.Name() == name {
			return b
		}
	}
	k.t.Fatalf("no breaker %s kept", name)
	return nil
}

func TestTransportBoundEvictsTheLeastRecentlyUsedIdleBreaker(t *testing.T) {
	k := newKeeper(t, 2, time.Hour, nil)
	k.mustGet("a", "b", "a") // b is now the least recently used
	k.mustGet("c")
	if got := k.kept(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("kept %v, want [a c]", got)
	}
	if _, evicted := k.madeAndEvicted(); !slices.Equal(evicted, []string{"b"}) {
		t.Fatalf("OnEvict saw %v, want [b]", evicted)
	}
	if s := k.tr.Stats(); s != (breaker.TransportStats{Breakers: 2, Made: 3, BoundEvictions: 1}) {
		t.Fatalf("stats %+v", s)
	}

	// An evicted name starts again with a new breaker.
	old := k.breaker("a")
	k.mustGet("b")
	k.mustGet("a")
	if b := k.breaker("a"); b == old || b.Snapshot().Totals.Admitted != 1 {
		t.Fatalf("a was evicted and asked for again: got the old breaker back (%v) or old counts (%+v)", b == old, b.Snapshot().Totals)
	}
	made, evicted := k.madeAndEvicted()
	if !slices.Equal(made, []string{"a", "b", "c", "b", "a"}) || !slices.Equal(evicted, []string{"b", "a", "c"}) {
		t.Fatalf("made %v, evicted %v", made, evicted)
	}
}

func TestTransportNeverEvictsABreakerThatIsBusyOpenOrHeld(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	k := newKeeper(t, 1, time.Hour, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("s") {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "wait":
			arrived <- struct{}{}
			<-release
		}
	})
	refused := func(why string) {
		t.Helper()
		sent := k.sent.Load()
		if err := k.get("other"); !errors.Is(err, breaker.ErrTooManyBreakers) || errors.Is(err, breaker.ErrRejected) {
			t.Fatalf("a new name while the only breaker is %s = %v, want ErrTooManyBreakers", why, err)
		}
		if k.sent.Load() != sent {
			t.Fatal("the refused request was sent")
		}
		if got := k.kept(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("kept %v while a is %s", got, why)
		}
	}

	t.Run("a call in flight", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, k.srv.URL+"/?h=a&s=wait", nil)
			resp, err := k.tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-arrived
		refused("in flight")
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a call in flight made directly on the breaker", func(t *testing.T) {
		b, err := k.tr.Breaker("a")
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		refused("in flight outside the Transport")
		c.Done(nil)
	})
	t.Run("forced open or closed", func(t *testing.T) {
		b := k.breaker("a")
		for _, action := range []breaker.Action{breaker.ActionForceOpen, breaker.ActionForceClosed} {
			if _, err := b.Apply(breaker.Command{Action: action}); err != nil {
				t.Fatal(err)
			}
			refused(string(action))
		}
		if _, err := b.Apply(breaker.Command{Action: breaker.ActionRelease}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("open, then half-open", func(t *testing.T) {
		for range 4 {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, k.srv.URL+"/?h=a&s=500", nil)
			resp, err := k.tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		b := k.breaker("a")
		if b.State() != breaker.Open {
			t.Fatalf("a is %v after four 500s", b.State())
		}
		refused("open")
		k.clk.Advance(time.Second)
		refused("due to go half-open")
		if b.State() != breaker.HalfOpen {
			t.Fatalf("a is %v, want half-open", b.State())
		}
		refused("half-open")
		k.mustGet("a") // the probe succeeds: closed, and evictable again
	})
	t.Run("closed and idle again, it makes room", func(t *testing.T) {
		k.mustGet("other")
		if got := k.kept(); !slices.Equal(got, []string{"other"}) {
			t.Fatalf("kept %v, want [other]", got)
		}
		if s := k.tr.Stats(); s.Refused != 7 || s.BoundEvictions != 1 || s.Breakers != 1 {
			t.Fatalf("stats %+v, want 7 refused, 1 eviction", s)
		}
	})
}

func TestTransportEvictsIdleBreakersAfterIdleTimeout(t *testing.T) {
	const idle = 80 * time.Second // looked for every 10s
	k := newKeeper(t, 10, idle, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("h") == "failing" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	k.mustGet("a", "failing", "failing", "failing", "failing")
	if b := k.breaker("failing"); b.State() != breaker.Open {
		t.Fatalf("failing is %v, want open", b.State())
	}
	k.clk.Advance(idle - time.Nanosecond)
	k.mustGet("b")
	if got := k.kept(); !slices.Equal(got, []string{"a", "failing", "b"}) {
		t.Fatalf("kept %v a moment before the idle timeout, want a still there", got)
	}
	k.clk.Advance(idle / 8)
	k.mustGet("b")
	if got := k.kept(); !slices.Equal(got, []string{"failing", "b"}) {
		t.Fatalf("kept %v after the idle timeout, want a evicted and the open breaker kept", got)
	}
	if _, evicted := k.madeAndEvicted(); !slices.Equal(evicted, []string{"a"}) {
		t.Fatalf("OnEvict saw %v, want [a]", evicted)
	}

	k.clk.Advance(10 * idle) // failing is due to go half-open, b is idle
	if err := k.get("c"); err != nil {
		t.Fatal(err)
	}
	if got := k.kept(); !slices.Equal(got, []string{"failing", "c"}) {
		t.Fatalf("kept %v, want b evicted, failing kept (never evicted while not closed)", got)
	}
	if s := k.tr.Stats(); s != (breaker.TransportStats{Breakers: 2, Made: 4, IdleEvictions: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestTransportStaysWithinItsBoundUnderConcurrentRequests(t *testing.T) {
	const max = 4
	k := newKeeper(t, max, time.Second, nil)
	var wg sync.WaitGroup
	var refusals atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				err := k.get(fmt.Sprint("host-", (g*7+i)%12))
				switch {
				case errors.Is(err, breaker.ErrTooManyBreakers):
					refusals.Add(1)
				case err != nil:
					t.Error(err)
					return
				}
				if n := len(k.tr.Breakers()); n > max {
					t.Errorf("%d breakers kept, bound %d", n, max)
					return
				}
				if i%50 == 0 {
					k.clk.Advance(200 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	made, evicted := k.madeAndEvicted()
	s := k.tr.Stats()
	if s.Made != uint64(len(made)) || s.IdleEvictions+s.BoundEvictions != uint64(len(evicted)) ||
		len(made)-len(evicted) != s.Breakers || s.Breakers > max || s.Refused != uint64(refusals.Load()) {
		t.Fatalf("stats %+v; OnNew saw %d, OnEvict %d, %d refusals", s, len(made), len(evicted), refusals.Load())
	}
	t.Logf("stats %+v", s)
	if s.BoundEvictions == 0 {
		t.Fatalf("stats %+v: 12 names through a bound of 4 evicted nothing", s)
	}
	for _, b := range k.tr.Breakers() {
		if n := b.Snapshot().InFlight; n != 0 {
			t.Errorf("%s has %d calls in flight after every request ended", b.Name(), n)
		}
	}
	if k.sent.Load()+refusals.Load() != 8*200 {
		t.Fatalf("%d requests sent and %d refused, want %d in all", k.sent.Load(), refusals.Load(), 8*200)
	}
}

func TestTransportConfigNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		cfg   breaker.TransportConfig
		field string
	}{
		{breaker.TransportConfig{MaxBreakers: -1}, "MaxBreakers"},
		{breaker.TransportConfig{IdleTimeout: -time.Second}, "IdleTimeout"},
	} {
		tr := breaker.NewTransport(nil, tc.cfg)
		_, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil))
		if !errors.Is(err, breaker.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("RoundTrip with a bad %s = %v", tc.field, err)
		}
	}
}

func TestTransportEvictsIdleBreakersOnlyIfItCanTellTheirOwner(t *testing.T) {
	for _, tc := range []struct {
		name         string
		onNew, onEvi bool
		evicted      bool
	}{
		{"no hooks: nobody to tell", false, false, true},
		{"OnNew and OnEvict", true, true, true},
		{"OnNew without OnEvict: kept", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := breakertest.NewEpochClock()
			cfg := breaker.TransportConfig{Config: breaker.Config{Clock: clk}, IdleTimeout: time.Minute}
			if tc.onNew {
				cfg.OnNew = func(*breaker.Breaker) {}
			}
			if tc.onEvi {
				cfg.OnEvict = func(*breaker.Breaker) {}
			}
			tr := breaker.NewTransport(nil, cfg)
			if _, err := tr.Breaker("rarely-used"); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Hour)
			if _, err := tr.Breaker("busy"); err != nil {
				t.Fatal(err)
			}
			if s := tr.Stats(); (s.IdleEvictions == 1) != tc.evicted || s.Breakers != 2-int(s.IdleEvictions) {
				t.Fatalf("stats %+v, want evicted: %v", s, tc.evicted)
			}
		})
	}
}
