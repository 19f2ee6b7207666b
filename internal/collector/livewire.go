package collector

import (
	"context"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
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
	if info.Conn != nil {
		hi.sess = &session{info.Conn}
	}
	return hi
}

// publisher publishes events (commands and their results) to live
// state's subscribers.
type publisher struct{ l *live.State }

func (p publisher) publish(e cbdash.Event) { p.l.Publish(e) }

// session is an instance's connection (an ingest session, live.Conn)
// as the holds send to it.
type session struct{ conn live.Conn }

func (s *session) send(v any) { s.conn.Send(v) }

// holdsHooks, commandHooks and fleetHooks are the holds, the commands
// and the fleet as the ingest pipeline tells them what it did
// (ingest.Holds, Commands, Fleet).
type (
	holdsHooks   struct{ m *holdManager }
	commandHooks struct{ c *Collector }
	fleetHooks   struct{ f *fleet }
)

func keyOf(k live.Key) instKey { return instKey{k.Service, k.Instance} }

func (h holdsHooks) Hello(ctx context.Context, k live.Key)    { h.m.hello(ctx, keyOf(k)) }
func (h holdsHooks) Pull(ctx context.Context, k live.Key)     { h.m.pull(ctx, keyOf(k)) }
func (h holdsHooks) Observe(k live.Key, ws []protocol.Window) { h.m.observe(keyOf(k), ws) }

func (h commandHooks) Results(k live.Key, rs []protocol.CommandResult) {
	h.c.commandResults(keyOf(k), rs)
}

func (h fleetHooks) Hello(ctx context.Context, hello *protocol.Hello, last uint64, at time.Time, connected bool) {
	h.f.hello(ctx, hello, last, at, connected)
}
func (h fleetHooks) Batch(r live.Update)     { h.f.batch(r) }
func (h fleetHooks) Disconnected(k live.Key) { h.f.disconnected(keyOf(k)) }
