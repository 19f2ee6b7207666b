package alert_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingester posts window reports of checkout/payments (instance
// checkout-1) to a stack's HTTP ingest, one batch each, in sequence.
type ingester struct {
	t     *testing.T
	stack *stacktest.Stack
	seq   atomic.Uint64
}

func (in *ingester) window(state string, c protocol.Counts) {
	in.t.Helper()
	now := in.stack.Clock.Now()
	w := protocol.Window{Breaker: "payments", Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: state, Counts: c}
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: "checkout-1",
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 100,
				FailureRateThreshold: 50, MinimumCalls: 20, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: in.seq.Add(1), SentAt: now.UnixMilli(), Windows: []protocol.Window{w}},
	}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, in.stack.URL()+"/api/v1/ingest", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+in.stack.AgentToken)
	hr.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		in.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		in.t.Fatalf("ingest: %d", res.StatusCode)
	}
}

var (
	closedCalls = protocol.Counts{Admitted: 20, Successes: 20}
	// drilled is a second of a forced-open breaker whose fallbacks
	// served the calls it rejected.
	drilled = protocol.Counts{RejectedForced: 30, FallbackSuccess: 27, FallbackFailure: 3}
)

// fallbackStack starts a stack on clk (at path, "" = new) with its alert
// service evaluating every second and a fallback_unexercised rule on
// checkout/payments (For 0: 30 days; hold 1m) telling rcv.
func fallbackStack(t *testing.T, clk *breakertest.Clock, path string, rcv *receiver, rule bool) *stacktest.Stack {
	t.Helper()
	st := stacktest.Start(t, stacktest.Options{Clock: clk, Path: path, Alert: func(c *alert.Config) {
		c.Delivery.AllowPrivate = true
	}})
	if rule {
		if _, err := st.Alerts.CreateRule(t.Context(), cbdash.AlertRule{Name: "payments fallback", Service: "checkout", Breaker: "payments",
			Kind: cbdash.AlertFallbackUnexercised, Hold: time.Minute, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// waitMessages advances clk by step until rcv has n messages.
func waitMessages(t *testing.T, clk *breakertest.Clock, rcv *receiver, n int, step time.Duration, what string) []alert.Message {
	t.Helper()
	var ms []alert.Message
	eventually.True(t, what, func() bool {
		if ms = messages(t, rcv); len(ms) >= n {
			return true
		}
		clk.Advance(step)
		return false
	})
	return ms
}

// A breaker known for 30 days whose fallback never served rejected calls
// fires the fallback_unexercised alert, saying how long and what to do;
// a drill that makes the fallbacks serve resolves it.
func TestFallbackNotExercisedFiresAndADrillResolvesIt(t *testing.T) {
	clk := clocktest.Virtual()
	rcv := newReceiver(t)
	st := fallbackStack(t, clk, "", rcv, true)
	in := &ingester{t: t, stack: st}
	known := clk.Now()
	in.window(protocol.StateClosed, closedCalls)
	for range 5 { // evaluated for a while: a breaker known for seconds does not fire
		clk.Advance(time.Second)
	}

	clk.Advance(alert.DefaultFallbackFor)
	in.window(protocol.StateClosed, closedCalls)
	ms := waitMessages(t, clk, rcv, 1, time.Second, "the fallback_unexercised alert")
	m := ms[0]
	if m.Event != cbdash.AlertFiring || m.Subject != "checkout/payments" || m.Kind != cbdash.AlertFallbackUnexercised {
		t.Fatalf("first message %+v", m)
	}
	if m.At.Sub(known) < alert.DefaultFallbackFor {
		t.Errorf("fired at %v, %v after the breaker was known: before 30 days", m.At, m.At.Sub(known))
	}
	for _, want := range []string{"checkout/payments fallback has never served rejected calls in the 30 days", "since " + known.UTC().Format("2006-01-02 15:04 UTC"),
		"schedule a drill: cbdash drill schedule checkout/payments --every"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("text %q lacks %q", m.Text, want)
		}
	}

	ada := cbdash.Actor{Name: "ada", Role: cbdash.RoleOperator, Kind: cbdash.ActorUser}
	if _, err := st.Collector.CreateHold(t.Context(), ada, cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
		Action: protocol.ActionForceOpen, TTL: 5 * time.Minute, Reason: "exercise the fallback"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	in.window(protocol.StateForcedOpen, drilled)
	ms = waitMessages(t, clk, rcv, 2, 5*time.Second, "the resolve after the drill")
	r := ms[1]
	if r.Event != cbdash.AlertResolved || r.Subject != "checkout/payments" || !strings.Contains(r.Now, "fallback exercised again") ||
		!strings.Contains(r.Now, "90 % served: 27 of 30") {
		t.Errorf("resolve %+v", r)
	}
}

// The fallback's last run survives a restart: read from the stored
// windows, not the live state (which starts empty), so the alert fires
// 30 days after that run, saying when it was, not that it never ran.
func TestFallbackNotExercisedCountsFromTheStoredRunAfterARestart(t *testing.T) {
	clk := clocktest.Virtual()
	rcv := newReceiver(t)
	first := fallbackStack(t, clk, "", rcv, true)
	in := &ingester{t: t, stack: first}
	in.window(protocol.StateClosed, closedCalls)
	clk.Advance(10 * 24 * time.Hour)
	in.window(protocol.StateOpen, protocol.Counts{RejectedOpen: 10, FallbackSuccess: 10})
	served := clk.Now().Truncate(time.Second) // the end of the stored second
	clk.Advance(time.Second)
	eventually.True(t, "the fallback run stored", func() bool {
		fs, err := first.Store.FallbackFreshness(t.Context())
		return err == nil && len(fs) == 1 && fs[0].LastServed.Equal(served)
	})
	first.Stop()

	clk.Advance(25 * 24 * time.Hour) // 35 days known, 25 since the run
	again := fallbackStack(t, clk, first.Path, rcv, false)
	in.stack = again
	in.window(protocol.StateClosed, closedCalls)
	for range 5 { // evaluated for a while: 25 days since the run, 35 since known
		clk.Advance(time.Second)
	}
	clk.Advance(served.Add(alert.DefaultFallbackFor - time.Minute).Sub(clk.Now()))
	in.window(protocol.StateClosed, closedCalls)
	ms := waitMessages(t, clk, rcv, 1, 5*time.Second, "the alert, 30 days after the stored run")
	m := ms[0]
	if m.At.Sub(served) < alert.DefaultFallbackFor || m.At.Sub(served) > alert.DefaultFallbackFor+time.Minute {
		t.Errorf("fired %v after the stored run, want 30 days (and an evaluation)", m.At.Sub(served))
	}
	if want := "has not served rejected calls for 30 days (last at " + served.UTC().Format("2006-01-02 15:04 UTC"); !strings.Contains(m.Text, want) {
		t.Errorf("text %q lacks %q", m.Text, want)
	}
}
