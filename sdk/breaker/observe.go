package breaker

import (
	"slices"
	"sync"
	"sync/atomic"
)

type observer struct {
	fn       func(Transition)
	canceled atomic.Bool
}

// Subscribe registers fn to be told of every transition from now on, and
// returns a function that unsubscribes it.
//
// Observers are called outside any lock, one transition at a time, in the
// order the transitions happened; each transition goes to the observers
// subscribed when it happened. Whichever goroutine made a transition (or
// is already delivering) calls them, so fn must not block: hand the event
// to a buffered channel or a queue and return. fn may call the breaker's
// methods (a transition it causes is delivered after it returns). A panic
// in fn is recovered and logged to Config.Logger. After cancel returns, fn
// is not called again unless a call to it had already begun.
func (b *Breaker) Subscribe(fn func(Transition)) (cancel func()) {
	_, cancel = b.subscribe(fn, false)
	return cancel
}

// SubscribeSnapshot is Subscribe that also returns a snapshot taken at the
// same moment: fn is told of exactly the transitions after the snapshot,
// so that a new viewer neither misses nor repeats one.
func (b *Breaker) SubscribeSnapshot(fn func(Transition)) (Snapshot, func()) {
	return b.subscribe(fn, true)
}

func (b *Breaker) subscribe(fn func(Transition), snap bool) (Snapshot, func()) {
	o := &observer{fn: fn}
	var s Snapshot
	now := b.now()
	func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		ep := b.settleLocked(now)
		if snap {
			s = b.snapshot(ep, now)
		}
		b.observers = append(slices.Clip(b.observers), o)
	}()
	b.deliver()
	var once sync.Once
	return s, func() {
		once.Do(func() {
			o.canceled.Store(true)
			b.mu.Lock()
			defer b.mu.Unlock()
			i := slices.Index(b.observers, o)
			if i >= 0 {
				b.observers = slices.Delete(slices.Clone(b.observers), i, i+1)
			}
		})
	}
}

// deliver hands the queued transitions to their observers. Only one
// goroutine delivers at a time, without holding b.mu while observers run;
// the others leave their transitions in the queue for it, which keeps the
// order. Should a panic get out of an observer's call (Config.Logger
// panicking while it logs an observer's panic), the next transition is
// delivered all the same: the panic goes on, and no one is left
// delivering.
func (b *Breaker) deliver() {
	batch := b.takePending(false)
	if batch == nil {
		return
	}
	done := false
	defer func() {
		if !done {
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	for batch != nil {
		for _, p := range batch {
			for _, o := range p.obs {
				if !o.canceled.Load() {
					b.notify(o.fn, p.t)
				}
			}
		}
		batch = b.takePending(true)
	}
	done = true
}

// takePending takes the queued transitions for the goroutine that
// delivers them (mine: it is that goroutine already). It returns nil when
// there are none (then no one delivers) or another goroutine delivers.
func (b *Breaker) takePending(mine bool) []pendingTransition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if (b.delivering && !mine) || len(b.pending) == 0 {
		if mine {
			b.delivering = false
		}
		return nil
	}
	b.delivering = true
	batch := b.pending
	b.pending = nil
	return batch
}

func (b *Breaker) notify(fn func(Transition), t Transition) {
	defer func() {
		if r := recover(); r != nil && b.cfg.Logger != nil {
			b.cfg.Logger.Error("breaker observer panicked", "breaker", b.name, "panic", r)
		}
	}()
	fn(t)
}
