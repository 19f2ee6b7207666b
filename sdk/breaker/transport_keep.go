package breaker

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// ErrTooManyBreakers is wrapped by the error of a request that needs a new
// breaker while a Transport keeps TransportConfig.MaxBreakers breakers
// and none of them can be evicted. The request is not sent. It is not a
// rejection (it does not match ErrRejected): no breaker judged the
// dependency.
var ErrTooManyBreakers = errors.New("breaker: transport keeps MaxBreakers breakers, none of them evictable")

// TransportStats counts what a Transport did with its breakers since
// NewTransport.
type TransportStats struct {
	Breakers       int    // breakers kept now, <= TransportConfig.MaxBreakers
	Made           uint64 // breakers made, evicted ones included
	IdleEvictions  uint64 // breakers evicted after IdleTimeout without use
	BoundEvictions uint64 // breakers evicted to make room for a new name at MaxBreakers
	Refused        uint64 // requests refused with ErrTooManyBreakers
}

// kept is a breaker the Transport keeps, with what eviction needs to know.
type kept struct {
	b        *Breaker
	lastUsed time.Time    // when the Transport last handed it out; guarded by Transport.mu
	useSeq   uint64       // Transport.uses at that moment, to tell uses at one instant apart
	users    atomic.Int32 // requests between acquire and the end of their call
}

// evictable reports whether k may be forgotten: no request of the
// Transport holds it, and it is closed with no call in flight. It reads
// the state without making due lazy transitions (which would call
// observers under the Transport's lock): an open breaker whose open
// duration has passed counts as open, so it stays.
func (k *kept) evictable() bool {
	return k.users.Load() == 0 && k.b.ep.Load().state == Closed && k.b.inFlight() == 0
}

// inFlight returns the calls admitted and not ended. It may count a call
// that is ending at that moment, never miss one.
func (b *Breaker) inFlight() int64 {
	if b.cfg.MaxConcurrent > 0 {
		return b.inflight.Load()
	}
	t := b.ctr.totals() // loads the ends before Admitted
	return int64(t.Admitted) - int64(t.Successes+t.Failures+t.Ignored)
}

// acquire returns the breaker named name, made if needed, marked as used
// now and held by one more user until the caller drops k.users. Every
// IdleTimeout/8 it first evicts the idle breakers.
func (t *Transport) acquire(name string) (*kept, error) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	if now.Sub(t.swept) >= t.cfg.IdleTimeout/8 && (t.cfg.OnEvict != nil || t.cfg.OnNew == nil) {
		t.evictIdleLocked(now)
	}
	k := t.breakers[name]
	if k == nil {
		if len(t.breakers) >= t.cfg.MaxBreakers && !t.evictOldestLocked() {
			t.stats.Refused++
			return nil, fmt.Errorf("%s: %w (%d kept)", name, ErrTooManyBreakers, len(t.breakers))
		}
		b, err := New(name, t.cfg.Config)
		if err != nil {
			return nil, err
		}
		k = &kept{b: b}
		t.breakers[name] = k
		t.order = append(t.order, k)
		t.stats.Made++
		if t.cfg.OnNew != nil {
			t.cfg.OnNew(b)
		}
	}
	t.uses++
	k.lastUsed, k.useSeq = now, t.uses
	k.users.Add(1)
	return k, nil
}

// evictIdleLocked evicts every evictable breaker unused for IdleTimeout.
func (t *Transport) evictIdleLocked(now time.Time) {
	t.swept = now
	for _, k := range slices.Clone(t.order) {
		if now.Sub(k.lastUsed) >= t.cfg.IdleTimeout && k.evictable() {
			t.evictLocked(k)
			t.stats.IdleEvictions++
		}
	}
}

// evictOldestLocked evicts the least recently used evictable breaker and
// reports whether there was one.
func (t *Transport) evictOldestLocked() bool {
	var oldest *kept
	for _, k := range t.order {
		if (oldest == nil || k.useSeq < oldest.useSeq) && k.evictable() {
			oldest = k
		}
	}
	if oldest == nil {
		return false
	}
	t.evictLocked(oldest)
	t.stats.BoundEvictions++
	return true
}

func (t *Transport) evictLocked(k *kept) {
	delete(t.breakers, k.b.name)
	t.order = slices.DeleteFunc(t.order, func(o *kept) bool { return o == k })
	if t.cfg.OnEvict != nil {
		t.cfg.OnEvict(k.b)
	}
}

// Breaker returns the breaker named name, making it if needed (and
// evicting another one if MaxBreakers are kept, or failing with an error
// wrapping ErrTooManyBreakers when none can be). It counts as a use of the
// breaker: a caller that keeps the breaker to call it directly should ask
// for it again now and then (it is cheap), or it may be evicted as idle
// between its calls and the calls be made on a breaker the Transport (and
// an agent told by OnEvict) no longer knows.
func (t *Transport) Breaker(name string) (*Breaker, error) {
	k, err := t.acquire(name)
	if err != nil {
		return nil, err
	}
	k.users.Add(-1)
	return k.b, nil
}

// Breakers returns the breakers kept now, in the order they were made.
func (t *Transport) Breakers() []*Breaker {
	t.mu.Lock()
	defer t.mu.Unlock()
	bs := make([]*Breaker, len(t.order))
	for i, k := range t.order {
		bs[i] = k.b
	}
	return bs
}

// Stats returns the Transport's counters.
func (t *Transport) Stats() TransportStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	s.Breakers = len(t.breakers)
	return s
}
