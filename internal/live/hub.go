package live

import (
	"sync"

	"github.com/cbdash/cbdash"
)

// hub fans events out to subscribers. Publishing never blocks: each
// subscriber has its own queue, drained into its channel by a goroutine of
// its own. In that queue a dependency's view replaces the one still queued
// for the same dependency (the newest view moves to the end; views are
// whole states, so a lagging subscriber loses nothing by skipping the
// older one), so a lagging subscriber holds at most one view per
// dependency. Every other event (transitions, commands) is kept, in order;
// a subscriber with more of them queued than its buffer is dropped and its
// channel closed, so a slow dashboard cannot hold up ingest. It is safe for
// concurrent use; the collector publishes while holding the live-state
// lock, which is what makes Subscribe's snapshot-and-subscribe atomic.
type hub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	buffer  int
	closed  bool
	onDrop  func()    // counts a dropped subscriber; may be nil
	onCount func(int) // reports the number of subscribers; may be nil
}

type subscriber struct {
	ch    chan cbdash.Event // unbuffered; closed by pump when the subscriber is removed or dropped
	kinds map[string]bool   // nil = every kind
	limit int               // most queued events that are not dependency views
	wake  chan struct{}     // 1: something was queued
	done  chan struct{}     // closed when removed or dropped

	mu      sync.Mutex
	pending []cbdash.Event // pending[head:] in order; a replaced view leaves a zero Event
	head    int
	holes   int                          // replaced views in pending[head:]
	deps    map[cbdash.DependencyKey]int // index in pending of each dependency's queued view
	others  int                          // queued or in-hand events that are not dependency views
}

func newHub(buffer int) *hub {
	return &hub{subs: make(map[*subscriber]struct{}), buffer: buffer}
}

// add registers a subscriber of the given kinds (nil = all) that may queue
// buffer events besides dependency views (0 = the hub's default). After
// close it returns a subscriber whose channel is already closed.
func (h *hub) add(kinds map[string]bool, buffer int) *subscriber {
	if buffer <= 0 {
		buffer = h.buffer
	}
	s := &subscriber{
		ch:    make(chan cbdash.Event),
		kinds: kinds,
		limit: buffer,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		deps:  make(map[cbdash.DependencyKey]int),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s
	}
	h.subs[s] = struct{}{}
	h.count()
	go s.pump()
	return s
}

// remove unregisters s and closes its channel; it is idempotent.
func (h *hub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.done)
		h.count()
	}
}

// publish offers e to every subscriber without blocking.
func (h *hub) publish(e cbdash.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.kinds != nil && !s.kinds[e.Kind] {
			continue
		}
		if !s.offer(e) {
			delete(h.subs, s)
			close(s.done)
			if h.onDrop != nil {
				h.onDrop()
			}
			h.count()
		}
	}
}

// close drops every subscriber and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.done)
	}
	h.count()
}

func (h *hub) count() {
	if h.onCount != nil {
		h.onCount(len(h.subs))
	}
}

// offer queues e; false when s has more than its limit of events other
// than dependency views queued.
func (s *subscriber) offer(e cbdash.Event) bool {
	s.mu.Lock()
	if e.Kind == cbdash.EventDependency && e.Dependency != nil {
		k := e.Dependency.DependencyKey
		if i, ok := s.deps[k]; ok {
			s.pending[i] = cbdash.Event{}
			s.holes++
		}
		s.deps[k] = len(s.pending)
	} else {
		if s.others >= s.limit {
			s.mu.Unlock()
			return false
		}
		s.others++
	}
	s.pending = append(s.pending, e)
	if dead := s.head + s.holes; dead > 64 && 2*dead > len(s.pending) {
		s.compactLocked()
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// compactLocked moves the queued events to the start of pending, without
// the holes of replaced views.
func (s *subscriber) compactLocked() {
	n := 0
	for _, e := range s.pending[s.head:] {
		if e.Kind == "" {
			continue
		}
		if e.Kind == cbdash.EventDependency && e.Dependency != nil {
			s.deps[e.Dependency.DependencyKey] = n
		}
		s.pending[n] = e
		n++
	}
	clear(s.pending[n:])
	s.pending, s.head, s.holes = s.pending[:n], 0, 0
}

// next takes the oldest queued event; false when none is queued. An event
// other than a view still counts against the limit until sent.
func (s *subscriber) next() (cbdash.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.head < len(s.pending) {
		e := s.pending[s.head]
		s.pending[s.head] = cbdash.Event{}
		s.head++
		switch {
		case e.Kind == "":
			s.holes--
			continue
		case e.Kind == cbdash.EventDependency && e.Dependency != nil:
			delete(s.deps, e.Dependency.DependencyKey)
		}
		if s.head == len(s.pending) {
			s.pending, s.head = s.pending[:0], 0
		}
		return e, true
	}
	s.pending, s.head = s.pending[:0], 0
	return cbdash.Event{}, false
}

// pump moves queued events into s.ch until s is removed or dropped, then
// closes s.ch.
func (s *subscriber) pump() {
	defer close(s.ch)
	for {
		e, ok := s.next()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.ch <- e:
		case <-s.done:
			return
		}
		if e.Kind != cbdash.EventDependency || e.Dependency == nil {
			s.mu.Lock()
			s.others--
			s.mu.Unlock()
		}
	}
}
