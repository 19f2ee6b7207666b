package alert_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// fleet is the real stack in a synctest bubble: a store (SQLite, or
// PostgreSQL with CBDASH_TEST_POSTGRES), a collector taking instances'
// hellos and batches through its ingest path (what POST /api/v1/ingest
// and the agents' batches go through; an agent's websocket cannot live
// in a bubble), and an alert Service reading the collector's live feed.
// The instances are of service inventory, breaker db (count window of
// 20 calls, failure-rate threshold 50 %, at least 10 calls).
type fleet struct {
	t       *testing.T
	clk     *clocktest.Running
	st      *store.Store
	col     *collector.Collector
	svc     *alert.Service
	seq     map[string]uint64
	state   map[string]string  // each instance's breaker state
	rate    map[string]float64 // each instance's failure rate, percent
	service map[string]string  // each instance's service (default inventory)
	started int64
}

var inventoryDB = cbdash.DependencyKey{Service: "inventory", Breaker: "db"}

// newFleet starts the collector and the alert Service (evaluating every
// second, linking to https://cbdash.example) on a new store; rules are
// created by the caller before start.
func newFleet(t *testing.T) *fleet {
	clk := clocktest.NewRunning()
	st := storetest.Open(t, clk)
	col, err := collector.New(collector.Config{Store: st, Clock: clk, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	})
	<-col.Ready()
	return &fleet{t: t, clk: clk, st: st, col: col, seq: map[string]uint64{}, state: map[string]string{}, rate: map[string]float64{},
		service: map[string]string{}, started: clk.Now().UnixMilli()}
}

// start runs an alert Service, delivering to rcv (stopped by the
// returned running's stop, or at the test's end).
func (f *fleet) start(rcv *receiver) *running {
	r := startService(f.t, alert.Config{Source: f.col, Store: f.st, Clock: f.clk, Interval: time.Second,
		ExternalURL: "https://cbdash.example", Delivery: rcv.delivery(alert.DeliveryConfig{})})
	f.svc = r.svc
	return r
}

func (f *fleet) hello(inst string) *protocol.Hello {
	svc := f.service[inst]
	if svc == "" {
		svc = inventoryDB.Service
	}
	return &protocol.Hello{Type: "hello", Protocol: protocol.Version, Service: svc, Instance: inst, SDKVersion: "test",
		StartedAt: f.started, Breakers: []protocol.BreakerConfig{{Name: inventoryDB.Breaker, WindowKind: "count", WindowSize: 20,
			FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: time.Hour.Milliseconds(), HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}}
}

// report sends inst's batch: its transitions to the states given (in
// order, now) and a one-second window report in the last state, with
// the instance's failure rate over 20 calls.
func (f *fleet) report(inst string, to ...string) {
	f.t.Helper()
	now := f.clk.Now().UnixMilli()
	if f.state[inst] == "" {
		f.state[inst] = protocol.StateClosed
	}
	f.seq[inst]++
	b := &protocol.Batch{Type: "batch", Seq: f.seq[inst], SentAt: now}
	for _, s := range to {
		cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
		if s != protocol.StateOpen {
			cause = protocol.Cause{Kind: protocol.CauseProbesSucceeded}
		}
		b.Transitions = append(b.Transitions, protocol.Transition{Breaker: inventoryDB.Breaker, From: f.state[inst], To: s, At: now,
			Generation: f.seq[inst], Cause: cause})
		f.state[inst] = s
	}
	failed := int64(f.rate[inst] / 5) // of 20 calls
	b.Windows = []protocol.Window{{Breaker: inventoryDB.Breaker, Start: now - 1000, Millis: 1000, State: f.state[inst],
		Counts:   protocol.Counts{Admitted: 20, Successes: 20 - failed, Failures: failed, Errors: failed},
		Headroom: protocol.Headroom{Calls: 20, Failures: failed, MinimumCalls: 10, FailureRate: f.rate[inst], FailureRateThreshold: 50}}}
	if _, err := f.col.Ingest(context.Background(), f.hello(inst), b); err != nil {
		f.t.Fatalf("ingest %s: %v", inst, err)
	}
}

// run reports every instance every 5 s for d (the clock moves d).
func (f *fleet) run(d time.Duration, insts ...string) {
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		for _, inst := range insts {
			f.report(inst)
		}
		bubbletest.Advance(5 * time.Second)
	}
	bubbletest.Settle()
}

// texts decodes the receiver's generic JSON bodies to their texts.
func texts(t *testing.T, rcv *receiver) []string {
	t.Helper()
	var out []string
	for _, b := range rcv.received() {
		var m alert.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Text)
	}
	return out
}

// TestHeadroomAlertFollowsTheBreakerOpen is issue 33's first finding on
// the real stack: a headroom alert fires (failure rate 30 % within 20
// points of 50 %), the breaker opens on 1 and then 3 of 3 instances and
// stays open for four times the rule's hold: no RESOLVED is sent while it
// is open. Once it is closed again everywhere and the failure rate is
// back, one RESOLVED says the breaker is closed again, and after how long.
func TestHeadroomAlertFollowsTheBreakerOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		if _, err := f.st.CreateAlertRule(context.Background(), cbdash.AlertRule{Name: "inventory heading for open", Service: "inventory",
			Breaker: "db", Kind: cbdash.AlertHeadroom, Margin: 20, Hold: 30 * time.Second, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		insts := []string{"inventory-1", "inventory-2", "inventory-3"}
		f.run(10*time.Second, insts...)
		for _, inst := range insts {
			f.rate[inst] = 30
		}
		f.run(10*time.Second, insts...)
		if got := texts(t, rcv); len(got) != 1 || !strings.HasPrefix(got[0], "[FIRING] inventory heading for open: inventory/db failure rate 30.0%") {
			t.Fatalf("receiver got %q, want the headroom alert", got)
		}
		f.report("inventory-1", protocol.StateOpen)
		f.run(6*time.Second, insts...)
		f.report("inventory-2", protocol.StateOpen)
		f.report("inventory-3", protocol.StateOpen)
		for _, inst := range insts {
			f.rate[inst] = 0 // an open breaker's window is empty
		}
		f.run(2*time.Minute, insts...)
		if got := texts(t, rcv); len(got) != 1 {
			t.Fatalf("receiver got %q while the breaker was open on 3 of 3 for 2m (hold 30s), want the alert only", got)
		}
		if fa := f.svc.Alerts(); len(fa) != 1 || !strings.Contains(fa[0].Detail, "open on 3 of 3 instances (it was heading for open)") {
			t.Errorf("firing now = %+v, want the headroom alert saying the breaker is open on 3 of 3", fa)
		}
		for _, inst := range insts {
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
		}
		f.run(40*time.Second, insts...)
		got := texts(t, rcv)
		if len(got) != 2 || !strings.Contains(got[1], "[RESOLVED] inventory heading for open: inventory/db is closed again after 2m") ||
			!strings.Contains(got[1], "closed on 3 of 3 instances") {
			t.Fatalf("receiver got %q, want the resolve saying the breaker is closed again on 3 of 3 after 2m out of closed", got)
		}
	})
}

// TestFlappingBreakerSendsAtMostThree is issue 33's flapping check on
// the real stack: 40 transitions in under 10 minutes (a breaker opening
// every 45 s, closing again 20 s later) send at most 3 notifications with
// the open rule's defaults: the alert, one flapping message with its
// summary, one resolve once it settled, which says so. Every transition
// is in the store's history.
func TestFlappingBreakerSendsAtMostThree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		ctx := context.Background()
		if _, err := f.st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "inventory open", Service: "inventory", Breaker: "db",
			Kind: cbdash.AlertOpen, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		const inst = "inventory-1"
		f.run(5*time.Second, inst)
		from := f.clk.Now()
		transitions := 0
		for transitions < 39 {
			f.report(inst, protocol.StateOpen)
			f.run(20*time.Second, inst)
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
			f.run(25*time.Second, inst)
			transitions += 3
		}
		f.report(inst, protocol.StateOpen)
		f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
		transitions += 3
		if took := f.clk.Now().Sub(from); took > 10*time.Minute {
			t.Fatalf("%d transitions took %s, want under 10m", transitions, took)
		}
		f.run(3*time.Minute, inst) // settles 2m after the last open (10m / 5 opens)
		got := texts(t, rcv)
		if len(got) > 3 {
			t.Fatalf("receiver got %d messages for %d transitions, want at most 3:\n%s", len(got), transitions, strings.Join(got, "\n"))
		}
		want := []string{"[FIRING] inventory open: inventory/db is open on 1 of 1 instances",
			"[FLAPPING] inventory open: inventory/db is flapping: opened 6 times in ",
			"[RESOLVED] inventory open: settled after flapping (opened 14 times since"}
		for i, w := range want {
			if i >= len(got) || !strings.HasPrefix(got[i], w) {
				t.Errorf("message %d = %q, want it to start %q (all: %q)", i, at0(got, i), w, got)
			}
		}
		trs, err := f.st.TransitionsReceivedSince(ctx, from.Add(-time.Second), 0)
		if err != nil || len(trs) != transitions {
			t.Errorf("history holds %d transitions (%v), want every one of the %d", len(trs), err, transitions)
		}
	})
}

func at0(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// TestSilenceHoldsBackAndEndsOnTime: a silence of inventory/db stops the
// notification of the open alert it matches (the delivery log says
// which silence held it back); when the silence ends, 3 minutes later,
// the alert still firing is sent within one evaluation (1 s), and its
// resolve follows as usual. A silence of another breaker holds nothing
// back.
func TestSilenceHoldsBackAndEndsOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		rcv.clock = f.clk
		ctx := context.Background()
		rule, err := f.st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "inventory open", Service: "inventory", Kind: cbdash.AlertOpen,
			Hold: 30 * time.Second, WebhookURL: rcv.URL})
		if err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		const inst = "inventory-1"
		f.run(5*time.Second, inst)
		ends := f.clk.Now().Add(3 * time.Minute)
		for _, m := range []cbdash.SilenceMatchers{{Service: "inventory", Breaker: "cache"}, {Service: "inventory", Breaker: "db"}} {
			if _, err := f.svc.CreateSilence(ctx, cbdash.Silence{Matchers: m, Reason: "db failover drill", EndsAt: ends}, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		f.report(inst, protocol.StateOpen)
		f.run(time.Minute, inst)
		if got := texts(t, rcv); len(got) != 0 {
			t.Fatalf("receiver got %q during the silence, want nothing", got)
		}
		log, err := f.svc.Deliveries(ctx, cbdash.DeliveryQuery{RuleID: rule.ID})
		if err != nil || len(log) != 1 || log[0].OK || !strings.Contains(log[0].Error, "silenced by silence 2 until") {
			t.Fatalf("delivery log = %+v (%v), want the firing held back by silence 2", log, err)
		}
		if sls, err := f.svc.Silences(ctx, false); err != nil || len(sls) != 2 || sls[0].CreatedBy != "alice" {
			t.Errorf("active silences = %+v (%v), want both, created by alice", sls, err)
		}
		f.run(ends.Sub(f.clk.Now())+2*time.Second, inst)
		got := texts(t, rcv)
		if len(got) != 1 || !strings.HasPrefix(got[0], "[FIRING] inventory open: inventory/db is open on 1 of 1") {
			t.Fatalf("receiver got %q after the silence ended, want the alert still firing", got)
		}
		if late := rcv.at[0].Sub(ends); late < 0 || late > time.Second+bubbletest.Settling {
			t.Errorf("sent %s after the silence ended, want within the 1 s evaluation", late)
		}
		f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
		f.run(40*time.Second, inst)
		if got := texts(t, rcv); len(got) != 2 || !strings.HasPrefix(got[1], "[RESOLVED] inventory open: inventory/db is closed again") {
			t.Errorf("receiver got %q, want the alert and its resolve", got)
		}
	})
}

// TestOneDependencyDownAcrossServicesIsOneMessage: a rule watching breaker
// db of every service, grouped by breaker, sends one message when db
// opens on 20 services within its group wait, listing all 20, and one
// when it has closed again everywhere; a 21st service opening later is
// one more message, after the group interval.
func TestOneDependencyDownAcrossServicesIsOneMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		if _, err := f.st.CreateAlertRule(context.Background(), cbdash.AlertRule{Name: "db down", Service: "*", Breaker: "db",
			Kind: cbdash.AlertOpen, Hold: 30 * time.Second, GroupBy: cbdash.GroupBreaker, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		var insts []string
		for i := range 21 {
			inst := fmt.Sprintf("svc-%02d-1", i)
			f.service[inst] = fmt.Sprintf("svc-%02d", i)
			insts = append(insts, inst)
		}
		f.run(5*time.Second, insts...)
		for _, inst := range insts[:20] {
			f.report(inst, protocol.StateOpen)
			bubbletest.Advance(200 * time.Millisecond) // 20 trips over 4 s, within the 10 s group wait
		}
		f.run(15*time.Second, insts...)
		msgs := messages(t, rcv)
		if len(msgs) != 1 || msgs[0].Subject != "*/db" || len(msgs[0].Subjects) != 20 || msgs[0].Event != cbdash.AlertFiring ||
			!strings.HasPrefix(msgs[0].Text, "[FIRING] db down: 20 alerts: svc-00/db is open on 1 of 1 instances") {
			t.Fatalf("receiver got %+v, want one firing message for 20 services", msgs)
		}
		f.report(insts[20], protocol.StateOpen)
		f.run(75*time.Second, insts...) // the group interval (1m) after the first message
		if msgs = messages(t, rcv); len(msgs) != 2 || len(msgs[1].Subjects) != 1 || msgs[1].Subjects[0] != "svc-20/db" {
			t.Fatalf("receiver got %+v, want a second message for the 21st service", msgs)
		}
		for _, inst := range insts {
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
		}
		f.run(45*time.Second, insts...)
		if msgs = messages(t, rcv); len(msgs) != 3 || msgs[2].Event != cbdash.AlertResolved || len(msgs[2].Subjects) != 21 {
			t.Errorf("receiver got %+v, want one resolve for all 21", msgs)
		}
	})
}

// messages decodes the receiver's generic JSON bodies.
func messages(t *testing.T, rcv *receiver) []alert.Message {
	t.Helper()
	var out []alert.Message
	for _, b := range rcv.received() {
		var m alert.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestFlappingMessageOnceAcrossATakeover: a breaker flaps, the leader
// sends the alert and the flapping message and stops; the next leader
// (a handover: same store, replaying the trips after the mark) sends
// neither again while the breaker keeps flapping, and sends the one
// resolve when it settles.
func TestFlappingMessageOnceAcrossATakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		if _, err := f.st.CreateAlertRule(context.Background(), cbdash.AlertRule{Name: "inventory open", Service: "inventory", Breaker: "db",
			Kind: cbdash.AlertOpen, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
		first := f.start(rcv)
		const inst = "inventory-1"
		cycle := func() {
			f.report(inst, protocol.StateOpen)
			f.run(10*time.Second, inst)
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
			f.run(10*time.Second, inst)
		}
		for range 7 {
			cycle()
		}
		if got := texts(t, rcv); len(got) != 2 || !strings.HasPrefix(got[1], "[FLAPPING]") {
			t.Fatalf("the first leader sent %q, want the alert and the flapping message", got)
		}
		first.stop()
		f.start(rcv)
		for range 5 {
			cycle()
		}
		if got := texts(t, rcv); len(got) != 2 {
			t.Fatalf("after the takeover the webhook got %q, want nothing more while it flaps", got)
		}
		f.run(3*time.Minute, inst)
		if got := texts(t, rcv); len(got) != 3 || !strings.HasPrefix(got[2], "[RESOLVED] inventory open: settled after flapping") {
			t.Errorf("the webhook got %q, want one settle message last", got)
		}
	})
}

// TestSilencedAlertResolvedMeanwhileSendsNothing: an alert that fires and
// resolves within a silence sends nothing, neither during the silence
// nor when it ends; the delivery log says why for both.
func TestSilencedAlertResolvedMeanwhileSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		ctx := context.Background()
		rule, err := f.st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "inventory open", Service: "inventory", Kind: cbdash.AlertOpen,
			Hold: 30 * time.Second, WebhookURL: rcv.URL})
		if err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		const inst = "inventory-1"
		f.run(5*time.Second, inst)
		if _, err := f.svc.CreateSilence(ctx, cbdash.Silence{Matchers: cbdash.SilenceMatchers{Service: "inventory"}, Reason: "deploy",
			EndsAt: f.clk.Now().Add(2 * time.Minute)}, "alice"); err != nil {
			t.Fatal(err)
		}
		f.report(inst, protocol.StateOpen)
		f.run(10*time.Second, inst)
		f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
		f.run(3*time.Minute, inst)
		if got := texts(t, rcv); len(got) != 0 {
			t.Fatalf("receiver got %q, want nothing: the alert fired and resolved within the silence", got)
		}
		log, err := f.svc.Deliveries(ctx, cbdash.DeliveryQuery{RuleID: rule.ID})
		if err != nil || len(log) != 2 || log[0].Event != cbdash.AlertResolved || !strings.Contains(log[0].Error, "its firing was silenced") ||
			!strings.Contains(log[1].Error, "silenced by silence 1") {
			t.Errorf("delivery log = %+v (%v), want the firing and the resolve held back, saying why", log, err)
		}
	})
}
