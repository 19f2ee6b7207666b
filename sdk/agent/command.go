package agent

import (
	"fmt"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// commandLogSize is how many command ids the agent remembers to apply
// each command at most once. The collector redelivers a command only
// until it has its result, so recent ids are enough.
const commandLogSize = 4096

// maxTTLMillis bounds a command's TTL (100 years, well within
// time.Duration) so that no ttl_ms from the wire overflows.
const maxTTLMillis = 100 * 365 * 24 * 3600 * 1000

// commandLog remembers the results of the last commands applied, by id,
// so that a redelivered command is answered again instead of applied
// again. It is owned by the report goroutine.
type commandLog struct {
	size    int
	results map[string]protocol.CommandResult
	order   []string // oldest first
}

func newCommandLog(size int) *commandLog {
	return &commandLog{size: size, results: make(map[string]protocol.CommandResult, size)}
}

func (l *commandLog) get(id string) (protocol.CommandResult, bool) {
	r, ok := l.results[id]
	return r, ok
}

func (l *commandLog) put(r protocol.CommandResult) {
	if len(l.order) >= l.size {
		delete(l.results, l.order[0])
		l.order = l.order[1:]
	}
	l.results[r.ID] = r
	l.order = append(l.order, r.ID)
}

// inCommand is a command as read from the wire; malformed is set when it
// could not be decoded (then only its id and breaker may be known).
type inCommand struct {
	cmd       protocol.Command
	malformed error
}

// command applies c to its breaker, at most once per id, and queues the
// result (after the transition the command caused) for the next batch.
func (a *Agent) command(in inCommand, seen *commandLog) {
	c := in.cmd
	log := a.log.With("command_id", c.ID, "breaker", c.Breaker, "action", c.Action)
	if c.ID == "" {
		log.Warn("command refused: no id, so no result can be sent", "malformed", in.malformed)
		return
	}
	if r, ok := seen.get(c.ID); ok {
		log.Info("command delivered again: answered with its first result, not applied again")
		a.queue(newItem(nil, nil, &r))
		return
	}
	now := a.cfg.Clock.Now()
	r := protocol.CommandResult{ID: c.ID, Breaker: c.Breaker, At: now.UnixMilli()}
	t := a.lookup(c.Breaker)
	switch err := c.Validate(); {
	case in.malformed != nil:
		r.Error = "malformed command: " + in.malformed.Error()
	case err != nil:
		r.Error = err.Error()
	case t == nil:
		r.Error = "unknown breaker " + c.Breaker
	case c.TTLMillis > maxTTLMillis:
		r.Error = fmt.Sprintf("ttl_ms %d is too large (at most %d)", c.TTLMillis, int64(maxTTLMillis))
	case c.ExpiresAt != 0 && now.UnixMilli() > c.ExpiresAt:
		r.Error = "command expired before delivery"
	case t.cmd == nil:
		r.Error = "holds not supported: " + holdsName(t.cfg) + " cannot be held open or closed"
		r.State = t.src.Snapshot().State.String()
	default:
		state, err := t.cmd.Apply(breaker.Command{
			ID: c.ID, Action: breaker.Action(c.Action), TTL: time.Duration(c.TTLMillis) * time.Millisecond,
			Reason: c.Reason, Actor: c.Actor,
		})
		r.State = state.String()
		if err != nil {
			r.Error = err.Error()
		} else {
			r.OK = true
		}
	}
	if r.OK && c.Action == protocol.ActionDeferProbes {
		a.deferred(t, c.TTLMillis > 0)
	}
	r.At = a.cfg.Clock.Now().UnixMilli()
	if r.OK {
		log.Info("command applied", "state", r.State)
	} else {
		log.Warn("command refused", "reason", r.Error)
	}
	seen.put(r)
	// Apply made its transition synchronously: it goes before the result.
	a.queue(newItem(nil, nil, &r))
}

// holdsName names what cannot apply commands, for a refusal.
func holdsName(c protocol.BreakerConfig) string {
	if c.Library != "" {
		return "a " + c.Library + " breaker"
	}
	return "this breaker"
}

// deferred notes that t's probes are deferred by the collector (or no
// longer are). A deferral applied after the connection it came on ended
// is ended at once: the collector that sent it is lost.
func (a *Agent) deferred(t *tracked, on bool) {
	t.deferred.Store(on)
	if on && !a.connected.Load() {
		a.endDeferrals("the collector was lost")
	}
}

// endDeferrals ends every deferral of probes the collector made (see
// protocol.ActionDeferProbes): an instance that loses the collector
// probes on its own again at once, instead of waiting for the deferral's
// time box. Called when a session ends.
func (a *Agent) endDeferrals(why string) {
	for _, t := range a.registered() {
		if t.cmd == nil || !t.deferred.Swap(false) {
			continue
		}
		if _, err := t.cmd.Apply(breaker.Command{Action: breaker.ActionDeferProbes, Reason: why, Actor: "agent"}); err != nil {
			a.log.Warn("ending the deferral of probes", "breaker", t.cfg.Name, "err", err)
			continue
		}
		a.log.Info("probing on its own again", "breaker", t.cfg.Name, "reason", why)
	}
}
