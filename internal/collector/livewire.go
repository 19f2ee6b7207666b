package collector

import (
	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
)

// instKey names one instance (service and instance id), as the
// collector's maps key it; live state's is live.Key.
type instKey struct{ service, instance string }

// key is k as live state names it.
func (k instKey) key() live.Key { return live.Key{Service: k.service, Instance: k.instance} }

// liveState is live state (internal/live) with the reads the holds make
// of it (holdInstances, holdInstance), in the holds' own terms.
type liveState struct{ *live.State }

// holdInstances lists the instances of live state (connected or not).
func (l liveState) holdInstances() []holdInst {
	infos := l.Instances()
	out := make([]holdInst, len(infos))
	for i := range infos {
		out[i] = holdInstOf(&infos[i])
	}
	return out
}

// holdInstance returns one instance; ok is false when it is unknown.
func (l liveState) holdInstance(k instKey) (holdInst, bool) {
	info, ok := l.Instance(k.key())
	if !ok {
		return holdInst{}, false
	}
	return holdInstOf(&info), true
}

func holdInstOf(info *live.InstanceInfo) holdInst {
	hi := holdInst{ref: info.Ref, startedAt: info.StartedAt, breakers: info.Breakers, rates: info.Rates,
		unsupported: info.Unsupported, stale: info.Stale, pull: info.Pull}
	hi.sess, _ = info.Conn.(*session) // the only connections are the sessions
	return hi
}

// publisher publishes events (commands and their results) to live
// state's subscribers.
type publisher struct{ l *live.State }

func (p publisher) publish(e cbdash.Event) { p.l.Publish(e) }

// conn is s as live state keeps it: nil (no connection, HTTP ingest)
// when s is.
func conn(s *session) live.Conn {
	if s == nil {
		return nil
	}
	return s
}

// Send, Replaced and Quiet make a session a live.Conn.
func (s *session) Send(v any)             { s.send(v) }
func (s *session) Replaced()              { s.replaced() }
func (s *session) Quiet() <-chan struct{} { return s.quiet }
