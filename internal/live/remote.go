package live

import (
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Another collector's instances. Every collector of a fleet keeps the
// live state of the whole fleet: the collector an instance is connected
// to publishes its hellos and batches on the bus, and the others apply
// them here (RemoteHello, RemoteBatch); an instance connected here (by a
// websocket, or reporting over HTTP ingest) is never changed by them.

// RemoteHello applies another collector's hello of instance k (process
// startedAt, last stored seq last, received at at) unless k is connected
// here.
func (l *State) RemoteHello(k Key, startedAt int64, last uint64, at time.Time, h *protocol.Hello) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inst := l.remoteLocked(k, startedAt, true)
	if inst == nil || h == nil {
		return
	}
	inst.liveSeq = max(inst.liveSeq, last)
	h.Breakers = l.lists.share(k.Service, h.Breakers)
	inst.hello, inst.labels, inst.lastSeen, inst.stale = h, h.Labels, at, false
	l.declareLocked(inst, h.Breakers)
}

// RemoteBatch applies another collector's batch of instance k (process
// startedAt) as it applied it, unless k is connected here.
func (l *State) RemoteBatch(k Key, startedAt int64, b *protocol.Batch, at time.Time, skew int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.remoteLocked(k, startedAt, false) == nil {
		return
	}
	l.applyLocked(Update{Key: k, Batch: b, At: at, Skew: skew, Remote: true})
}

// remoteLocked returns instance k for another collector's update, made
// when unknown; nil when k is connected here (for a hello: with a
// session; the update is then dropped).
func (l *State) remoteLocked(k Key, startedAt int64, hello bool) *instance {
	inst := l.instances[k]
	if inst != nil && (inst.sess != nil || inst.pull) {
		if !hello {
			return nil // connected here: its own reports are what counts
		}
		if inst.sess != nil {
			return nil // a hello elsewhere: this session is about to end
		}
	}
	if inst == nil {
		inst = &instance{key: k, breakers: make(map[string]*ibreaker)}
		l.instances[k] = inst
	}
	inst.pull = false
	l.bump(inst) // its lines in the dependencies' aggregates are out of date
	if inst.startedAt != startedAt {
		inst.startedAt, inst.liveSeq = startedAt, 0
	}
	return inst
}

// Resync sets the instances not connected here to their last state in
// the store (after a gap on the bus).
func (l *State) Resync(ibs []cbdash.InstanceBreaker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ibs {
		if inst := l.instances[Key{r.Service, r.Instance}]; inst != nil && (inst.sess != nil || inst.pull) {
			continue
		}
		inst := l.storedInstanceLocked(r)
		l.bump(inst)
		l.resyncBreakerLocked(l.breakerLocked(inst, r.Breaker), r)
		if r.LastSeen.After(inst.lastSeen) {
			inst.lastSeen = r.LastSeen
		}
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// resyncBreakerLocked sets ib to stored line r where r is newer.
func (l *State) resyncBreakerLocked(ib *ibreaker, r cbdash.InstanceBreaker) {
	rc := r.Config
	if rc == nil {
		rc = &noConfig
	}
	if *ib.config != *rc { // values: a pointer of the store's is never live state's
		ib.config, ib.dep.shape = ownCopy(rc, &noConfig), nil
	}
	if r.State != ib.state {
		ib.state = r.State
		l.urgent[ib.dep] = struct{}{}
	}
	if r.LastTransition.After(ib.lastTransition) {
		ib.lastTransition = r.LastTransition
	}
	if r.Last != nil && r.Last.Start > ib.last.Start {
		ib.last = ownCopy(r.Last, &noWindow)
	}
	l.changedLocked(ib.dep)
}
