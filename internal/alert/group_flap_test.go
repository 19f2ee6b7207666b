package alert_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestGroupedFlappingFollowsItsFiring is finding 15 of the demo trial on
// the real stack: a rule on every service's db, grouped by breaker, hold
// 10 s. inventory/db opens 3 times and its alert resolves (episode 1,
// sent as the group's firing and resolve); then it opens 3 times within
// a few seconds (episode 2): its firing waits in the group (the group
// interval after the last message), and the sixth open in 10 minutes
// makes it flapping. The flapping message comes after the group's
// firing, never before, and says that 3 of its opens were in the
// earlier alert, which resolved.
func TestGroupedFlappingFollowsItsFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t)
		rcv := newBubbleReceiver(t)
		if _, err := f.st.CreateAlertRule(context.Background(), cbdash.AlertRule{Name: "db down", Service: "*", Breaker: "db",
			Kind: cbdash.AlertOpen, Hold: 10 * time.Second, GroupBy: cbdash.GroupBreaker, WebhookURL: rcv.URL}); err != nil {
			t.Fatal(err)
		}
		f.start(rcv)
		const inst = "inventory-1"
		f.run(5*time.Second, inst)
		for range 3 { // episode 1
			f.report(inst, protocol.StateOpen)
			f.run(5*time.Second, inst)
			f.report(inst, protocol.StateHalfOpen, protocol.StateClosed)
			f.run(5*time.Second, inst)
		}
		f.run(20*time.Second, inst) // the hold passes: resolved
		msgs := messages(t, rcv)
		if len(msgs) != 2 || msgs[0].Event != cbdash.AlertFiring || msgs[1].Event != cbdash.AlertResolved {
			t.Fatalf("episode 1 sent %+v, want the group's firing and its resolve", msgs)
		}
		resolvedAt := msgs[1].At
		for range 3 { // episode 2: the sixth open in 10 minutes is flapping
			f.report(inst, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateClosed)
			bubbletest.Advance(time.Second)
		}
		f.run(90*time.Second, inst)
		msgs = messages(t, rcv)
		var events []string
		for _, m := range msgs {
			events = append(events, m.Event)
		}
		if strings.Join(events, ",") != "firing,resolved,firing,flapping" {
			t.Fatalf("messages %v, want firing, resolved, then episode 2's firing before its flapping message: %+v", events, msgs)
		}
		fl := msgs[3]
		if !strings.Contains(fl.Text, "inventory/db is flapping: opened 6 times") ||
			!strings.Contains(fl.Text, "3 of them before this alert, in one that resolved at "+resolvedAt.UTC().Format(time.RFC3339)) {
			t.Errorf("flapping text %q, want the 6 opens and the 3 of the alert resolved at %s", fl.Text, resolvedAt.UTC().Format("15:04:05"))
		}
	})
}
