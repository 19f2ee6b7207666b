package ingest

import (
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// WireCommand is the protocol message for cmd sent at now: a force's TTL
// is what remains of it, so a late delivery ends at the same time.
func WireCommand(cmd cbdash.Command, now time.Time) protocol.Command {
	w := protocol.Command{
		Type: protocol.TypeCommand, ID: cmd.ID, Breaker: cmd.Breaker, Action: cmd.Action,
		Reason: cmd.Reason, Actor: cmd.Actor, IssuedAt: cmd.IssuedAt.UnixMilli(),
	}
	if cmd.Action == protocol.ActionDeferProbes && cmd.TTL > 0 {
		// What is left of the deferral (0 once it has passed: end it).
		w.TTLMillis = max(0, cmd.IssuedAt.Add(cmd.TTL).Sub(now).Milliseconds())
	}
	if !cmd.ExpiresAt.IsZero() {
		w.ExpiresAt = cmd.ExpiresAt.UnixMilli()
		if cmd.Action == protocol.ActionForceOpen || cmd.Action == protocol.ActionForceClosed {
			w.TTLMillis = max(1, cmd.ExpiresAt.Sub(now).Milliseconds())
		}
	}
	return w
}
