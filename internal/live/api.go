package live

import (
	"github.com/cbdash/cbdash"
)

// Subscribe returns the current live state, worst state first, and a
// channel of every later change of the given kinds (nil = every kind),
// atomically: no change is both in the snapshot and an event, and none is
// missed. A subscriber that lags gets the latest view of each dependency
// (an older one still waiting is skipped) and every other event in order;
// one with more than buffer of those waiting (0 = Config.SubscriberBuffer)
// is dropped and the channel closed, as it is after Close (or shortly
// after cancel). Call cancel when done (idempotent). The snapshot's and
// the events' slices, maps and pointers are shared between subscribers
// and must not be modified.
func (l *State) Subscribe(kinds map[string]bool, buffer int) (snapshot []cbdash.Dependency, events <-chan cbdash.Event, cancel func()) {
	snap, s := l.subscribe(kinds, buffer)
	return snap, s.ch, func() { l.hub.remove(s) }
}

// SubscribeViews is Subscribe with the snapshot's views shared rather
// than copied, in no order: each points at live state's immutable view
// of a dependency (the one its events carry), which the caller must not
// change. A subscriber that keeps every dependency holds a pointer each
// instead of a copy (about 500 bytes a dependency).
func (l *State) SubscribeViews(kinds map[string]bool, buffer int) (snapshot []*cbdash.Dependency, events <-chan cbdash.Event, cancel func()) {
	snap, s := l.subscribeViews(kinds, buffer)
	return snap, s.ch, func() { l.hub.remove(s) }
}

// Publish offers e (a command's event, say) to every subscriber, without
// blocking.
func (l *State) Publish(e cbdash.Event) { l.hub.publish(e) }

// Close drops every subscriber and refuses new ones (their channel is
// closed at once).
func (l *State) Close() { l.hub.close() }

// Kicked receives when dependencies changed state: the caller runs
// FlushUrgent then, off the ingest path.
func (l *State) Kicked() <-chan struct{} { return l.kick }

// Snapshot returns every dependency's current view, worst first, sharing
// the views (read-only, as in events): for readers that only look, such
// as the gauges of a scrape.
func (l *State) Snapshot() []cbdash.Dependency {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}
