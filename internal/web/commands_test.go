package web

import (
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestAuditShowsWhenAHoldEnded(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 19, 6, 0, 0, time.UTC)
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
	}
	for id, want := range map[string]string{
		"4": "2026-11-29 19:16:00 — released 19:06:02 by otto", // the all-instance release, not the one of checkout-2
		"3": "2026-11-29 19:15:00 (in 7m)",                     // another breaker's release does not end it
		"2": "2026-11-29 18:11:00 — expired",
		"1": "no expiry — reset 2026-11-29 19:06:01 by otto", // the instance reset ends the instance hold
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
