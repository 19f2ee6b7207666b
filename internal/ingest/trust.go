package ingest

import (
	"context"
	"slices"
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// What an agent token may do. An agent token (one is deployed on every
// instance) speaks for its instances only: the results it sends answer
// commands of its own service to its own instances (commandResults), a
// transition it says an operator command caused is shown as one only when
// the collector sent that command to that instance (vetCauses), and what
// it may create is bounded (limits.go). What is refused or distrusted is
// counted in cbdash_collector_agent_refused_total by reason.

// Reasons of cbdash_collector_agent_refused_total.
const (
	DistrustForeignResult      = "foreign_command_result"   // a result for a command of another service or instance
	distrustUnknownCommand     = "unverified_command_cause" // a cause of kind command the collector did not send
	refusedInstances           = "instance_limit"           // a new instance over Limits.MaxInstancesPerToken
	refusedBreakers            = "breaker_limit"            // new breakers over Limits.MaxBreakersPerToken
	refusedDependencies        = "dependency_limit"         // new dependencies over Limits.MaxDependencies (the collector's)
	refusedServiceInstances    = "service_instance_limit"   // a new instance over Limits.MaxInstancesPerService
	refusedServiceBreakers     = "service_breaker_limit"    // new breakers over Limits.MaxBreakersPerService
	refusedServiceDependencies = "service_dependency_limit" // new dependencies over Limits.MaxDependenciesPerService
	refusedTokenDependencies   = "token_dependency_limit"   // new dependencies over Limits.MaxDependenciesPerToken
	refusedConnections         = "connection_limit"         // a connection over Limits.MaxConnectionsPerToken
	refusedRehellos            = "rehello_limit"            // a hello on an open connection over Limits.RehelloBurst/RehelloEvery
)

var distrustReasons = strings.Join([]string{DistrustForeignResult, distrustUnknownCommand,
	refusedInstances, refusedBreakers, refusedDependencies, refusedServiceInstances, refusedServiceBreakers,
	refusedServiceDependencies, refusedTokenDependencies, refusedConnections, refusedRehellos}, ", ")

// Distrusted counts one refusal or distrust of reason (one of
// cbdash_collector_agent_refused_total's, as DistrustForeignResult).
func (c *Pipeline) Distrusted(reason string) { c.metrics.distrusted(reason) }

// distrusted counts one refusal or distrust of reason.
func (m *metrics) distrusted(reason string) {
	if m == nil {
		return
	}
	m.distrust.WithLabelValues(reason).Inc()
}

// vetCauses returns the batch to apply and store for instance k: b
// itself, or a copy whose causes the collector corrected. A cause that
// claims an operator command (kind command, or quorum) the collector did
// not send to k becomes of kind protocol.CauseAgentCommand (what the agent
// said is kept, and shown as the agent's word). A command it did send as
// a quorum advisory (actor cbdash.QuorumActor: agents report it as any
// command) becomes of kind protocol.CauseQuorum. A store error leaves the
// claims unverified too: a claim is believed only when it is proven.
func (c *Pipeline) vetCauses(ctx context.Context, k live.Key, b *protocol.Batch) *protocol.Batch {
	var ids []string
	for _, t := range b.Transitions {
		if claimsCommand(t.Cause) {
			ids = append(ids, t.Cause.CommandID)
		}
	}
	if len(ids) == 0 {
		return b
	}
	sent, err := c.store.CommandTargets(ctx, k.Service, k.Instance, ids)
	if err != nil {
		c.log.Error("check the commands of transition causes", "service", k.Service, "instance", k.Instance, "err", err)
	}
	var out *protocol.Batch
	for i, t := range b.Transitions {
		kind := vettedKind(t.Cause, sent)
		if kind == t.Cause.Kind {
			continue
		}
		if out == nil {
			o := *b
			o.Transitions = slices.Clone(b.Transitions)
			out = &o
		}
		out.Transitions[i].Cause.Kind = kind
		if kind == protocol.CauseAgentCommand {
			c.metrics.distrusted(distrustUnknownCommand)
			c.log.Info("a transition's command is not one the collector sent; stored as agent-reported",
				"service", k.Service, "instance", k.Instance, "breaker", t.Breaker, "command_id", t.Cause.CommandID, "actor", t.Cause.Actor)
		}
	}
	if out == nil {
		return b
	}
	return out
}

// claimsCommand reports whether cause c says a command of the collector's
// made the transition.
func claimsCommand(c protocol.Cause) bool {
	return c.Kind == protocol.CauseCommand || c.Kind == protocol.CauseQuorum
}

// vettedKind is the kind cause c is stored with, given the commands sent
// to its instance.
func vettedKind(c protocol.Cause, sent map[string]bool) string {
	switch {
	case !claimsCommand(c):
		return c.Kind
	case !sent[c.CommandID]:
		return protocol.CauseAgentCommand
	case c.Actor == cbdash.QuorumActor:
		return protocol.CauseQuorum
	}
	return protocol.CauseCommand
}
