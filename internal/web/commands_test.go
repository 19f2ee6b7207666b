package web

import (
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestAuditShowsWhenAHoldEnded(t *testing.T) {
	t.Parallel()
	// Evening of the epoch's day: every time below falls on that day, so
	// the release shows as a time of day.
	t0 := clocktest.Epoch().Truncate(24 * time.Hour).Add(19*time.Hour + 6*time.Minute)
	date := func(d time.Duration) string { return t0.Add(d).UTC().Format("2006-01-02 15:04:05") }
	clock := func(d time.Duration) string { return t0.Add(d).UTC().Format("15:04:05") }
	cmd := func(id, breaker, action, actor, instance string, at time.Time, ttl time.Duration) cbdash.Command {
		c := cbdash.Command{ID: id, IssuedAt: at, CommandRequest: cbdash.CommandRequest{
			Service: "checkout", Breaker: breaker, Action: action, Actor: actor, Instance: instance}}
		if ttl > 0 {
			c.ExpiresAt = at.Add(ttl)
		}
		return c
	}
	cmds := []cbdash.Command{ // newest first
		cmd("6", "payments", protocol.ActionRelease, "otto", "", t0.Add(2*time.Second), time.Minute),
		cmd("5", "payments", protocol.ActionRelease, "otto", "checkout-2", t0.Add(time.Second), time.Minute),
		cmd("7", "ledger", protocol.ActionReset, "otto", "checkout-2", t0.Add(time.Second), time.Minute),
		cmd("4", "payments", protocol.ActionForceOpen, "ada", "", t0, 10*time.Minute),
		cmd("3", "fraud", protocol.ActionForceClosed, "ada", "", t0.Add(-time.Minute), 10*time.Minute),
		cmd("2", "inventory", protocol.ActionForceOpen, "ada", "", t0.Add(-time.Hour), 5*time.Minute),
		cmd("1", "ledger", protocol.ActionForceClosed, "ada", "checkout-2", t0.Add(-time.Minute), 0),
	}
	now := t0.Add(2 * time.Minute)
	v := commandViews(cmds, now)
	byID := map[string]string{}
	for i, c := range cmds {
		byID[c.ID] = v[i].Expires
		if v[i].UntilISO != "" { // the page counts down what remains
			byID[c.ID] += " (in " + v[i].In + ")"
		}
	}
	for id, want := range map[string]string{
		"4": date(10*time.Minute) + " — released " + clock(2*time.Second) + " by otto", // the all-instance release, not the one of checkout-2
		"3": date(9*time.Minute) + " (in 7m0s)",                                        // another breaker's release does not end it
		"2": date(-55*time.Minute) + " — expired",
		"1": "no expiry — reset " + date(time.Second) + " by otto", // the instance reset ends the instance hold
		"6": "",
	} {
		if byID[id] != want {
			t.Errorf("command %s until = %q, want %q", id, byID[id], want)
		}
	}
	if strings.Contains(byID["4"], "(in") {
		t.Errorf("a released hold still counts down: %q", byID["4"])
	}
}

// The probe rotation's defer_probes (issue 35) shows the instances it was
// sent to and until when it defers them, and ends no hold.
func TestAuditShowsADeferralOfProbes(t *testing.T) {
	t.Parallel()
	t0 := clocktest.Epoch().Truncate(24 * time.Hour).Add(19 * time.Hour)
	hold := cbdash.Command{ID: "h", IssuedAt: t0, ExpiresAt: t0.Add(10 * time.Minute), CommandRequest: cbdash.CommandRequest{
		Service: "checkout", Breaker: "payments", Action: protocol.ActionForceOpen, Actor: "ada"}}
	def := cbdash.Command{ID: "d", IssuedAt: t0.Add(time.Second), ExpiresAt: t0.Add(10 * time.Minute), CommandRequest: cbdash.CommandRequest{
		Service: "checkout", Breaker: "payments", Action: protocol.ActionDeferProbes, TTL: 15 * time.Second,
		Actor: cbdash.QuorumActor, Reason: "probe rotation: ..."},
		Targets: []cbdash.CommandTarget{{Instance: "i1", Status: cbdash.TargetApplied}, {Instance: "i2", Status: cbdash.TargetPending}}}
	v := commandViews([]cbdash.Command{def, hold}, t0.Add(2*time.Second))
	if v[0].Action != "defer probes" || v[0].Scope != "2 instances" || v[0].Expires != t0.Add(16*time.Second).UTC().Format("2006-01-02 15:04:05") {
		t.Errorf("deferral shown as %q on %q until %q", v[0].Action, v[0].Scope, v[0].Expires)
	}
	if strings.Contains(v[1].Expires, "released") {
		t.Errorf("the deferral ended the hold: %q", v[1].Expires)
	}
}
