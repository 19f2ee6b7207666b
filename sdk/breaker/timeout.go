package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// timedCall is a call with a CallTimeout armed: whichever of its deadline
// and the caller ends it first wins, the other is thrown away.
type timedCall struct {
	done       atomic.Bool
	call       Call
	deadline   int64 // ns since the breaker was made
	cancel     context.CancelCauseFunc
	prev, next *timedCall // in the breaker's timeout queue, guarded by its lock
	queued     bool
}

// timeoutQueue holds a breaker's calls with a deadline in flight. Every
// call of a breaker has the same CallTimeout, so deadlines come in the
// order calls start: the queue is a list in that order, watched by one
// timer armed for its head. A call that ends in time only leaves the
// list; the timer, when it fires, ends every call whose deadline has come
// and arms itself for the next. So a call costs a list insert and removal
// under a short lock, not a runtime timer of its own.
type timeoutQueue struct {
	mu         sync.Mutex
	head, tail *timedCall
	armed      bool // the timer is set, for the head's deadline or an earlier one
}

// arm puts call c under the breaker's CallTimeout: at its deadline it is
// recorded as a Timeout that ended exactly then, and cancel (if not nil)
// is called with ErrTimeout. A result reported at or after the deadline
// is thrown away even if the timer has not fired yet (a timer may fire
// late), so the outcome never depends on the timer's punctuality.
func (b *Breaker) arm(c *Call, cancel context.CancelCauseFunc) {
	t := &timedCall{call: *c, deadline: c.start + b.timeoutNs, cancel: cancel}
	c.t = t
	q := &b.tq
	q.mu.Lock()
	defer q.mu.Unlock() // AfterFunc is the Clock's code
	t.queued = true
	if q.tail == nil {
		q.head, q.tail = t, t
	} else {
		t.prev, q.tail.next, q.tail = q.tail, t, t
	}
	if !q.armed {
		armed := false
		defer func() {
			if !armed { // Now or AfterFunc panicked: no timer watches the queue
				q.unlinkLocked(t)
				c.t = nil
			}
		}()
		b.timers.AfterFunc(time.Duration(max(t.deadline-b.now(), 0)), b.expireFn)
		q.armed, armed = true, true
	}
}

// remove takes t off the queue if it is still there.
func (q *timeoutQueue) remove(t *timedCall) {
	q.mu.Lock()
	q.unlinkLocked(t)
	q.mu.Unlock()
}

func (q *timeoutQueue) unlinkLocked(t *timedCall) {
	if !t.queued {
		return
	}
	t.queued = false
	if t.prev == nil {
		q.head = t.next
	} else {
		t.prev.next = t.next
	}
	if t.next == nil {
		q.tail = t.prev
	} else {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
}

// expire is the timeout timer: it ends every call whose deadline has
// come, outside the queue's lock, and arms the timer for the next one.
func (b *Breaker) expire() {
	for _, t := range b.takeDue() {
		b.timeOut(t)
	}
}

// takeDue takes the calls whose deadline has come off the queue and arms
// the timer for the next one.
func (b *Breaker) takeDue() []*timedCall {
	q := &b.tq
	var due []*timedCall
	q.mu.Lock()
	defer q.mu.Unlock() // Now and AfterFunc are the Clock's code
	now := b.now()      // under the lock, so that the next timer is armed from the time it is armed at
	for t := q.head; t != nil && t.deadline <= now; t = q.head {
		q.unlinkLocked(t)
		if t.done.CompareAndSwap(false, true) {
			due = append(due, t)
		}
	}
	q.armed = q.head != nil
	if q.armed {
		b.timers.AfterFunc(time.Duration(q.head.deadline-now), b.expireFn)
	}
	return due
}

// timeOut records t as a Timeout that ended at its deadline and cancels
// its context. The caller has won t.done.
func (b *Breaker) timeOut(t *timedCall) {
	b.finish(&t.call, Timeout, t.deadline)
	if t.cancel != nil {
		t.cancel(ErrTimeout)
	}
}
