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

// liveState is live state (internal/live) as the collector holds it.
type liveState struct{ *live.State }

// publisher publishes events (commands and their results) to live
// state's subscribers.
type publisher struct{ l *live.State }

func (p publisher) publish(e cbdash.Event) { p.l.Publish(e) }

// holdsHooks, commandHooks and fleetHooks are the holds, the commands
// and the fleet as the ingest pipeline tells them what it did
// (ingest.Holds, Commands, Fleet).
type (
	holdsHooks   struct{ m holdManager }
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
