package collector

import "strings"

// What an agent token may do. An agent token (one is deployed on every
// instance) speaks for its instances only: the results it sends answer
// commands of its own service to its own instances (commandResults), a
// transition it says an operator command caused is shown as one only when
// the collector sent that command to that instance (vetCauses), and what
// it may create is bounded (limits.go). What is refused or distrusted is
// counted in cbdash_collector_agent_refused_total by reason.

// Reasons of cbdash_collector_agent_refused_total.
const (
	distrustForeignResult  = "foreign_command_result"   // a result for a command of another service or instance
	distrustUnknownCommand = "unverified_command_cause" // a cause of kind command the collector did not send
	refusedInstances       = "instance_limit"           // a new instance over Config.MaxInstancesPerToken
	refusedBreakers        = "breaker_limit"            // new breakers over Config.MaxBreakersPerToken
	refusedDependencies    = "dependency_limit"         // new dependencies over Config.MaxDependencies
)

var distrustReasons = strings.Join([]string{distrustForeignResult, distrustUnknownCommand,
	refusedInstances, refusedBreakers, refusedDependencies}, ", ")

// distrusted counts one refusal or distrust of reason.
func (m *metrics) distrusted(reason string) {
	if m == nil {
		return
	}
	m.distrust.WithLabelValues(reason).Inc()
}
