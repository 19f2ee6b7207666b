package breaker

import (
	"fmt"
	"time"
)

// Apply carries out an operator command and returns the state it leaves
// the breaker in:
//
//   - force_open holds the breaker open (every call rejected with
//     ErrForcedOpen) and force_closed holds it closed (every call admitted
//     and recorded in a fresh window, never tripping), until release,
//     reset or their TTL runs out; no automatic transition happens
//     meanwhile. Repeating a force command in the state it forces makes no
//     transition, keeps the generation and the window, and replaces the
//     expiry (TTL 0 removes it) and the held command.
//   - release and reset leave the breaker closed with an empty window, a
//     new generation and the open duration back at its base. From closed
//     they make no transition (the window is still emptied).
//   - defer_probes (the collector's probe rotation, issue 35) defers the
//     breaker's probes until TTL from now: while open, it stays open past
//     its open duration until then (rejecting calls with ErrOpen), and an
//     open entered before then (a failed probe) lasts until then too.
//     TTL 0, or a later defer_probes with a shorter TTL, brings the end
//     forward: a breaker open longer than its own open duration becomes
//     half-open at once. Any closing ends the deferral, and a closed
//     breaker ignores it. It makes no transition and keeps the
//     generation; it never holds a breaker longer than TTL, so an
//     instance that stops hearing from the collector probes on its own
//     by then (the agent ends its deferrals at once when it loses the
//     collector).
//
// An unknown action or a negative TTL returns an error wrapping
// ErrInvalidCommand and changes nothing. Transitions are delivered to
// observers before Apply returns, unless another goroutine is delivering
// at that moment (then it delivers them, in order).
func (b *Breaker) Apply(cmd Command) (State, error) {
	switch cmd.Action {
	case ActionForceOpen, ActionForceClosed, ActionRelease, ActionReset, ActionDeferProbes:
	default:
		return b.State(), fmt.Errorf("%w: unknown action %q", ErrInvalidCommand, cmd.Action)
	}
	if cmd.TTL < 0 {
		return b.State(), fmt.Errorf("%w: TTL is negative (%v)", ErrInvalidCommand, cmd.TTL)
	}
	c := cmd
	now := b.now()
	ep := b.applyLocked(&c, now)
	b.deliver()
	return ep.state, nil
}

// applyLocked takes b.mu for Apply and returns the epoch it leaves.
func (b *Breaker) applyLocked(c *Command, now int64) *epoch {
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.settleLocked(now)
	switch c.Action {
	case ActionDeferProbes:
		return b.deferLocked(ep, c.TTL, now)
	case ActionForceOpen, ActionForceClosed:
		to := ForcedOpen
		if c.Action == ActionForceClosed {
			to = ForcedClosed
		}
		var until int64
		if c.TTL > 0 {
			until = now + int64(c.TTL)
		}
		if ep.state == to {
			ep.until.Store(until)
			ep.cmd.Store(c)
		} else {
			ep = b.transitionLocked(ep, to, now, Cause{Kind: CauseCommand, Command: c}, until, c)
		}
	default:
		if ep.state == Closed {
			since := ep.since
			ep = b.newEpochLocked(Closed)
			ep.since = since // no transition: still closed since then
			b.ep.Store(ep)
		} else {
			ep = b.transitionLocked(ep, Closed, now, Cause{Kind: CauseCommand, Command: c}, 0, nil)
		}
	}
	return ep
}

// deferLocked applies defer_probes with ttl at now to the settled epoch
// ep and returns the epoch it leaves (a half-open one if a shorter
// deferral made the open end due). b.mu is held.
func (b *Breaker) deferLocked(ep *epoch, ttl time.Duration, now int64) *epoch {
	var until int64
	if ttl > 0 && ep.state != Closed && ep.state != ForcedClosed {
		until = min(now+int64(ttl), clockRange)
	}
	b.deferUntil.Store(until)
	if ep.state != Open {
		return ep
	}
	ep.openUntil.Store(max(ep.openEnd, until, now))
	return b.settleLocked(now)
}
