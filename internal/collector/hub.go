package collector

import (
	"sync"

	"github.com/cbdash/cbdash"
)

// hub fans events out to subscribers. Publishing never blocks: a subscriber
// whose bounded channel is full is dropped and its channel closed, so a slow
// dashboard cannot hold up ingest. It is safe for concurrent use; the
// collector publishes while holding the live-state lock, which is what makes
// Subscribe's snapshot-and-subscribe atomic.
type hub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	buffer  int
	closed  bool
	onDrop  func()    // counts a dropped subscriber; may be nil
	onCount func(int) // reports the number of subscribers; may be nil
}

type subscriber struct {
	ch    chan cbdash.Event
	kinds map[string]bool // nil = every kind
}

func newHub(buffer int) *hub {
	return &hub{subs: make(map[*subscriber]struct{}), buffer: buffer}
}

// add registers a subscriber of the given kinds (nil = all) with a channel
// of buffer events (0 = the hub's default). After close it returns a
// subscriber whose channel is already closed.
func (h *hub) add(kinds map[string]bool, buffer int) *subscriber {
	if buffer <= 0 {
		buffer = h.buffer
	}
	s := &subscriber{ch: make(chan cbdash.Event, buffer), kinds: kinds}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s
	}
	h.subs[s] = struct{}{}
	h.count()
	return s
}

// remove unregisters s and closes its channel; it is idempotent.
func (h *hub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
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
		select {
		case s.ch <- e:
		default:
			delete(h.subs, s)
			close(s.ch)
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
		close(s.ch)
	}
	h.count()
}

func (h *hub) count() {
	if h.onCount != nil {
		h.onCount(len(h.subs))
	}
}
