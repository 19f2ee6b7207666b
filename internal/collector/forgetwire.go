package collector

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/cbdash/cbdash/internal/cluster"
)

// Breaker rows a hello deleted, told on the bus. A hello that no longer
// declares some of its instance's breakers deletes their rows; the store
// writer of every other collector may still cache them (their ids and
// states) and would write a later state of one of them to the deleted
// row (store.ForgetBreakers). The collector whose store deleted them
// publishes the instance on channel "forget" ([service, instance], JSON);
// the others drop their writers' cached rows of that instance, and all of
// them after a gap on the bus (when messages may have been missed).

// chanForget is the bus channel of instances whose breaker rows a hello
// deleted.
const chanForget = "forget"

// forgetQueue bounds the instances waiting to be published on chanForget;
// when it is full one is dropped (counted): the others' caches then miss
// it, as before issue 36, until their next gap.
const forgetQueue = 1024

// forgetWire is the fleet's side of chanForget.
type forgetWire struct {
	published atomic.Int64
	dropped   atomic.Int64
	applied   atomic.Int64 // other collectors' messages applied here
}

// runForgets registers with the store for its hellos' deletes and runs
// the publisher and the subscriber of chanForget until ctx ends.
func (f *fleet) runForgets(ctx context.Context) {
	if f.solo {
		return
	}
	fw := &f.fg
	out := make(chan instKey, forgetQueue)
	f.c.store.OnBreakersForgotten(func(service, instance string) {
		select {
		case out <- instKey{service, instance}:
		default:
			fw.dropped.Add(1)
		}
	})
	defer f.c.store.OnBreakersForgotten(nil)
	var wg sync.WaitGroup
	wg.Go(func() { f.subscribe(ctx, chanForget, f.applyForget, f.resyncForget) })
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case k := <-out:
			p, _ := json.Marshal([2]string{k.service, k.instance})
			if err := f.bus.Publish(ctx, chanForget, p); err != nil {
				if ctx.Err() == nil {
					f.c.log.Warn("publish deleted breaker rows: other collectors' writers forget them at their next gap", "service", k.service, "instance", k.instance, "err", err)
				}
				continue
			}
			fw.published.Add(1)
		}
	}
}

// applyForget drops this collector's cached breaker rows of the instance
// another collector's hello deleted rows of.
func (f *fleet) applyForget(ctx context.Context, m cluster.Message) {
	var k [2]string
	if err := json.Unmarshal(m.Payload, &k); err != nil || k[0] == "" || k[1] == "" {
		f.c.log.Warn("a message of deleted breaker rows is unreadable", "from", m.From, "payload", string(m.Payload), "err", err)
		return
	}
	if err := f.c.store.ForgetBreakers(ctx, k[0], k[1]); err != nil {
		if ctx.Err() == nil {
			f.c.log.Warn("forget deleted breaker rows", "service", k[0], "instance", k[1], "err", err)
		}
		return
	}
	f.fg.applied.Add(1)
}

// resyncForget drops every cached breaker row: the messages that said
// which were deleted may have been missed.
func (f *fleet) resyncForget(ctx context.Context) {
	if err := f.c.store.ForgetAllBreakers(ctx); err != nil && ctx.Err() == nil {
		f.c.log.Warn("forget cached breaker rows after a gap on the bus", "err", err)
	}
}
