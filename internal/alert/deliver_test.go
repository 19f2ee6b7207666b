package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// receiver is a real webhook endpoint that records the bodies it accepts
// and answers the first `fail` calls with `failStatus`. With a clock, it
// records the clock's time of every call.
type receiver struct {
	URL string
	// client reaches the receiver; nil for one on loopback, which any
	// client reaches at URL.
	client     *http.Client
	mu         sync.Mutex
	bodies     [][]byte
	calls      int
	fail       int
	failStatus int
	clock      interface{ Now() time.Time }
	at         []time.Time
}

// newReceiver starts a receiver on loopback, for a test outside a
// synctest bubble.
func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{failStatus: http.StatusServiceUnavailable}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(r)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// newBubbleReceiver starts a receiver on an in-memory network, for a test
// in a synctest bubble (synctest.Test); it is reached through delivery's
// client only.
func newBubbleReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{failStatus: http.StatusServiceUnavailable}
	srv := bubbletest.NewServer(t, r)
	r.URL, r.client = srv.URL, srv.Client
	return r
}

// delivery is the delivery config that reaches r, with the rest of d.
// AllowPrivate: a receiver on loopback is private, and the host of one in
// memory (bubble.test) must not be looked up when a rule is saved
// (CheckDestination), since a bubble cannot hold a DNS query.
func (r *receiver) delivery(d alert.DeliveryConfig) alert.DeliveryConfig {
	d.Client, d.AllowPrivate = r.client, true
	return d
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.clock != nil {
		r.at = append(r.at, r.clock.Now())
	}
	if r.calls <= r.fail {
		w.WriteHeader(r.failStatus)
		return
	}
	r.bodies = append(r.bodies, b)
}

func (r *receiver) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies)
}

// memLog is the delivery log kept in memory, for tests of the Deliverer
// alone; the store's implementation has its own tests.
type memLog struct {
	mu      sync.Mutex
	entries []cbdash.AlertDelivery
}

func (m *memLog) SaveAlertDelivery(_ context.Context, d cbdash.AlertDelivery) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.ID = int64(len(m.entries) + 1)
	m.entries = append(m.entries, d)
	return d.ID, nil
}

// gaps returns the durations between consecutive times.
func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

func TestFlappingBreakerSendsOneAlertAndOneResolve(t *testing.T) {
	rcv := newReceiver(t)
	log := &memLog{}
	clk := breakertest.NewClock(t0)
	d, err := alert.NewDeliverer(alert.DeliveryConfig{Clock: clk, AllowPrivate: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	e := alert.NewEngine()
	e.SetRules([]cbdash.AlertRule{{ID: 1, Name: "payments down", Service: "checkout", Kind: cbdash.AlertOpen,
		Hold: time.Minute, WebhookURL: rcv.URL, Format: cbdash.FormatJSON}})

	// Ten minutes of a breaker opening for 2 s every 5 s, evaluated every
	// second, then five quiet minutes.
	for sec := 0; sec < 900; sec++ {
		clk.Set(at(sec))
		state := "a:closed"
		if sec < 600 && sec%5 < 2 {
			state = "a:open"
		}
		e.Observe(depEvent(sec, dep(payments, state, "b:closed")))
		for _, n := range e.Evaluate(clk.Now()) {
			if _, err := d.Deliver(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}
	}
	bodies := rcv.received()
	if len(bodies) != 2 {
		t.Fatalf("receiver got %d messages, want 2 (one alert, one resolve):\n%s", len(bodies), bodies)
	}
	var fire, resolve alert.Message
	if err := json.Unmarshal(bodies[0], &fire); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bodies[1], &resolve); err != nil {
		t.Fatal(err)
	}
	if fire.Event != cbdash.AlertFiring || fire.Service != "checkout" || fire.Breaker != "payments" || !fire.At.Equal(at(0)) {
		t.Errorf("first message = %+v, want checkout/payments firing at 0s", fire)
	}
	// Last open second is 596; the hold of a minute ends at 656.
	if resolve.Event != cbdash.AlertResolved || !resolve.At.Equal(at(656)) || !resolve.Since.Equal(at(0)) {
		t.Errorf("second message = %+v, want resolved at 656s, since 0s", resolve)
	}
	if len(log.entries) != 2 || !log.entries[0].OK || log.entries[1].Event != cbdash.AlertResolved {
		t.Errorf("delivery log = %+v", log.entries)
	}
}

func TestDeliver(t *testing.T) {
	n := alert.Notification{Subject: "checkout/payments", Event: cbdash.AlertFiring, At: t0, Since: t0,
		Detail: "checkout/payments is open on 1 of 2 instances"}
	tests := []struct {
		name       string
		format     string
		fail       int
		failStatus int
		attempts   int
		backoff    time.Duration // 0 = the default (1 s)
		maxBackoff time.Duration // 0 = the default (1 min)
		wantOK     bool
		wantCalls  int
		wantWaits  []time.Duration
		wantStatus int
	}{
		{name: "delivers at once to a healthy receiver", wantOK: true, wantCalls: 1, wantStatus: 200},
		{name: "retries 5xx with doubling backoff", fail: 3, failStatus: 503, wantOK: true, wantCalls: 4,
			wantWaits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, wantStatus: 200},
		{name: "retries 429", fail: 1, failStatus: 429, wantOK: true, wantCalls: 2, wantWaits: []time.Duration{time.Second}, wantStatus: 200},
		{name: "gives up after the attempts", fail: 100, failStatus: 500, attempts: 3, wantCalls: 3,
			wantWaits: []time.Duration{time.Second, 2 * time.Second}, wantStatus: 500},
		{name: "caps the wait at MaxBackoff", fail: 100, failStatus: 502, attempts: 6, backoff: 300 * time.Millisecond,
			maxBackoff: time.Second, wantCalls: 6, wantStatus: 502,
			wantWaits: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second, time.Second, time.Second}},
		{name: "does not retry a 4xx", fail: 100, failStatus: 404, wantCalls: 1, wantStatus: 404},
		{name: "posts a Slack-compatible body", format: cbdash.FormatSlack, wantOK: true, wantCalls: 1, wantStatus: 200},
	}
	for _, tt := range tests {
		// The backoff waits are the system clock's, in a bubble: Deliver
		// returns at once, its waits measured by the receiver's calls.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rcv := newBubbleReceiver(t)
				clk := clocktest.NewRunning()
				rcv.fail, rcv.failStatus, rcv.clock = tt.fail, tt.failStatus, clk
				log := &memLog{}
				d, err := alert.NewDeliverer(rcv.delivery(alert.DeliveryConfig{Attempts: tt.attempts, Backoff: tt.backoff,
					MaxBackoff: tt.maxBackoff, Clock: clk}), log)
				if err != nil {
					t.Fatal(err)
				}
				n := n
				n.Rule = cbdash.AlertRule{ID: 9, Name: "r", Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: rcv.URL, Format: tt.format}
				entry, err := d.Deliver(context.Background(), n)
				if err != nil {
					t.Fatal(err)
				}
				rcv.mu.Lock()
				waits := gaps(rcv.at)
				rcv.mu.Unlock()
				if entry.OK != tt.wantOK || entry.Attempts != tt.wantCalls || entry.Status != tt.wantStatus || rcv.calls != tt.wantCalls {
					t.Errorf("entry = %+v, receiver calls = %d; want ok=%v attempts=%d status=%d", entry, rcv.calls, tt.wantOK, tt.wantCalls, tt.wantStatus)
				}
				if !slices.Equal(waits, tt.wantWaits) {
					t.Errorf("waits = %v, want %v", waits, tt.wantWaits)
				}
				if want := t0.Add(sum(waits)); !entry.At.Equal(want) {
					t.Errorf("logged at %v, want %v (after the waits, on the clock)", entry.At, want)
				}
				if len(log.entries) != 1 || log.entries[0].ID != entry.ID || entry.ID == 0 {
					t.Errorf("log = %+v, entry id %d", log.entries, entry.ID)
				}
				if !tt.wantOK {
					return
				}
				var body map[string]any
				if err := json.Unmarshal(rcv.received()[0], &body); err != nil {
					t.Fatal(err)
				}
				if tt.format == cbdash.FormatSlack {
					want := "[FIRING] r: checkout/payments is open on 1 of 2 instances"
					if body["text"] != want || len(body["blocks"].([]any)) != 1 {
						t.Errorf("slack body = %v, want text %q and one section block", body, want)
					}
				} else if body["event"] != "firing" || body["subject"] != "checkout/payments" || body["rule_id"] != 9.0 {
					t.Errorf("json body = %v", body)
				}
			})
		})
	}
}

func TestDeliverStopsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := newBubbleReceiver(t)
		rcv.fail = 100
		ctx, cancel := context.WithCancel(context.Background())
		log := &memLog{}
		d, _ := alert.NewDeliverer(rcv.delivery(alert.DeliveryConfig{}), log)
		type result struct {
			entry cbdash.AlertDelivery
			err   error
		}
		done := make(chan result, 1)
		go func() {
			e, err := d.Deliver(ctx, alert.Notification{Rule: cbdash.AlertRule{WebhookURL: rcv.URL}, Event: cbdash.AlertFiring})
			done <- result{e, err}
		}()
		synctest.Wait() // the first attempt failed; the first backoff wait (1 s) has begun
		cancel()
		r := <-done
		entry, err := r.entry, r.err
		if err == nil || entry.OK || entry.Attempts != 1 || len(log.entries) != 1 {
			t.Fatalf("entry = %+v, err = %v; want a logged give-up after one attempt and ctx's error", entry, err)
		}
	})
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}
