package live

import (
	"iter"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Quotas is live state as the quotas on what agents declare read it
// (internal/ingest's limits): what it holds, read and changed under its
// lock, within one call of State.Quotas only.
type Quotas struct{ l *State }

// Quotas runs f with live state locked, so that what f reads of it (and
// counts besides) cannot change before f has decided. f must not block,
// nor call live state otherwise.
func (l *State) Quotas(f func(Quotas)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(Quotas{l})
}

// Known reports whether live state holds instance k.
func (q Quotas) Known(k Key) bool { return q.l.instances[k] != nil }

// Holds reports whether live state holds dependency k (an instance
// declares it).
func (q Quotas) Holds(k cbdash.DependencyKey) bool { return q.l.deps[k] != nil }

// Dependencies is how many dependencies live state holds.
func (q Quotas) Dependencies() int { return len(q.l.deps) }

// ServiceDependencies is how many dependencies of service live state
// holds.
func (q Quotas) ServiceDependencies(service string) int { return q.l.perService[service] }

// Offline returns when instance k was last seen; ok is false when it is
// unknown or connected here.
func (q Quotas) Offline(k Key) (lastSeen time.Time, ok bool) {
	inst := q.l.instances[k]
	if inst == nil || inst.sess != nil {
		return time.Time{}, false
	}
	return inst.lastSeen, true
}

// Declares reports whether instance k declares breaker name.
func (q Quotas) Declares(k Key, name string) bool {
	inst := q.l.instances[k]
	return inst != nil && inst.breakers[name] != nil
}

// Declared yields the breakers instance k declares, each with the number
// of instances that declare its dependency (k's included).
func (q Quotas) Declared(k Key) iter.Seq2[string, int] {
	return func(yield func(string, int) bool) {
		inst := q.l.instances[k]
		if inst == nil {
			return
		}
		for name, ib := range inst.breakers {
			if !yield(name, len(ib.dep.members)) {
				return
			}
		}
	}
}

// Share returns a breaker list equal to bs that a hello of service holds
// already, or else bs, remembered (the list Hello would keep).
func (q Quotas) Share(service string, bs []protocol.BreakerConfig) []protocol.BreakerConfig {
	return q.l.lists.share(service, bs)
}

// Forget forgets offline instance k before Config.GoneAfter (to make
// room for a new instance under the quotas), as Sweep does after it, and
// publishes the dependencies that change. It does nothing to an instance
// connected here.
func (q Quotas) Forget(k Key) { q.l.forgetLocked(k) }
