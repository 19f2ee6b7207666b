package alert_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestFlappingMessageIsSentAgainLikeTheOthers: the webhook fails while
// the flapping message is being delivered and the leader stops during
// the retries' backoff (a handover); the next leader sends the flapping
// message again after the pending grace, as it does an undelivered
// firing or resolve, once, and the resolve when the breaker settles.
func TestFlappingMessageIsSentAgainLikeTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		ctx := context.Background()
		rule, err := f.st.CreateAlertRule(ctx, cbdash.AlertRule{Name: "inventory open", Service: "inventory", Breaker: "db",
			Kind: cbdash.AlertOpen, WebhookURL: rcv.URL})
		if err != nil {
			t.Fatal(err)
		}
		first := f.start(rcv)
		const inst = "inventory-1"
		open := func() {
			f.report(inst, protocol.StateOpen)
			f.run(10*time.Second, inst)
		}
		closeAgain := func() {
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
			f.run(10*time.Second, inst)
		}
		for range 5 {
			open()
			closeAgain()
		}
		if got := texts(t, rcv); len(got) != 1 || !strings.HasPrefix(got[0], "[FIRING]") {
			t.Fatalf("before the sixth open the webhook got %q, want the alert", got)
		}
		rcv.mu.Lock()
		rcv.fail = rcv.calls + 1000 // the webhook is down
		calls := rcv.calls
		rcv.mu.Unlock()
		open() // the sixth open: flapping; its message's attempts fail, 1 s, 2 s, 4 s apart
		rcv.mu.Lock()
		tried := rcv.calls - calls
		rcv.mu.Unlock()
		if tried < 2 {
			t.Fatalf("the flapping message was tried %d times, want its retries under way", tried)
		}
		first.stop() // during the backoff: the delivery did not complete
		kept, err := f.st.FiringAlerts(ctx)
		if err != nil || len(kept) != 1 || !kept[0].FlappingPending {
			t.Fatalf("kept = %+v (%v), want the flapping message pending", kept, err)
		}

		rcv.mu.Lock()
		rcv.fail = 0 // the webhook is back
		rcv.mu.Unlock()
		f.start(rcv)
		bubbletest.Advance(alert.DefaultPendingGrace + time.Second)
		bubbletest.Settle()
		got := texts(t, rcv)
		if len(got) != 2 || !strings.HasPrefix(got[1], "[FLAPPING] inventory open: inventory/db is flapping: opened 6 times") {
			t.Fatalf("after the takeover the webhook got %q, want the flapping message sent again", got)
		}
		if kept, _ := f.st.FiringAlerts(ctx); len(kept) != 1 || kept[0].FlappingPending {
			t.Errorf("kept = %+v, want the flapping message no longer pending once delivered", kept)
		}
		closeAgain()
		open()
		closeAgain()
		f.run(3*time.Minute, inst) // settles
		got = texts(t, rcv)
		if len(got) != 3 || !strings.HasPrefix(got[2], "[RESOLVED] inventory open: settled after flapping") {
			t.Errorf("the webhook got %q, want the alert, the flapping message once, and the resolve", got)
		}
		log, err := f.svc.Deliveries(ctx, cbdash.DeliveryQuery{RuleID: rule.ID})
		if err != nil {
			t.Fatal(err)
		}
		var flapping []bool
		for _, d := range log {
			if d.Event == cbdash.AlertFlapping {
				flapping = append(flapping, d.OK)
			}
		}
		if len(flapping) != 2 || !flapping[0] || flapping[1] {
			t.Errorf("flapping deliveries, newest first: %v, want the one cut short and then the one delivered", flapping)
		}
	})
}
