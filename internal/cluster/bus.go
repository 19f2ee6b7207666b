package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/cbdash/cbdash/internal/dsn"
)

// Errors of a Bus.
var (
	// ErrNoRoute is returned by Route when no live collector holds the
	// instance's connection: it is offline (a command for it waits in the
	// store for its next hello).
	ErrNoRoute = errors.New("cluster: no collector holds the instance's connection")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("cluster: closed")
	// ErrInvalid is wrapped by errors for bad arguments; the message names
	// the argument.
	ErrInvalid = errors.New("cluster: invalid argument")
	// ErrNoSchema is returned by Open when the database lacks the bus's
	// tables (cbdash_cluster_payloads, cbdash_cluster_routes): they come
	// with the store's migrations, so the store is opened first.
	ErrNoSchema = errors.New("the database has no tables of the collectors' bus: open the store first, which migrates it (migration 00041)")
)

// Claim is a node's claim of an instance (Bus.Claims).
type Claim struct{ Service, Instance, Node string }

// Message is what a subscriber receives.
type Message struct {
	Channel string // the logical channel it was published or routed on
	From    string // the node that sent it
	Payload []byte
	// Gap, when set, carries no payload: it says that messages may have
	// been missed on Channel (the node's listening connection was lost and
	// is back), so the subscriber should resynchronise from the store.
	Gap bool
}

// Bus connects the collectors of one deployment. Implementations are safe
// for concurrent use.
type Bus interface {
	// NodeID identifies this node among the collectors.
	NodeID() string
	// Publish sends payload to the subscribers of channel on every other
	// node; it never blocks on a slow subscriber. Errors: ErrInvalid (a bad
	// channel name), ErrClosed, the database's error.
	Publish(ctx context.Context, channel string, payload []byte) error
	// Subscribe returns the messages other nodes publish (or route to this
	// node) on channel, until cancel is called or the subscriber falls
	// more than its buffer behind, when the channel is closed.
	Subscribe(channel string) (msgs <-chan Message, cancel func())
	// Claim records that the instance (service, instance) is connected to
	// this node; Release undoes a claim of this node (a later claim by
	// another node stays).
	Claim(ctx context.Context, service, instance string) error
	Release(ctx context.Context, service, instance string) error
	// Claims lists the live claims of every node: the node that holds
	// each claimed instance's connection now. Errors: ErrClosed, the
	// database's error.
	Claims(ctx context.Context) ([]Claim, error)
	// Route sends payload on channel to the subscribers of the node that
	// holds the instance's connection (this node's own when it is this
	// one). Errors: ErrNoRoute, ErrInvalid, ErrClosed, the
	// database's error.
	Route(ctx context.Context, channel, service, instance string, payload []byte) error
	// Lead runs fn while this node is the leader of the singleton name,
	// and again each time it becomes leader after losing it, until ctx
	// ends; fn's context ends when leadership is lost. It returns when ctx
	// is done and fn has returned. At most one node holds a name's lock at
	// a time; a leader that loses it stops within the implementation's
	// check interval, so fn must tolerate a short overlap (be idempotent).
	Lead(ctx context.Context, name string, fn func(ctx context.Context)) error
	// Close stops the bus; subscribers' channels are closed.
	Close() error
}

var channelName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

func checkChannel(ch string) error {
	if !channelName.MatchString(ch) {
		return fmt.Errorf("%w: channel %q (want 1-40 of a-z, 0-9, _, starting with a letter)", ErrInvalid, ch)
	}
	return nil
}

func checkInstance(service, instance string) error {
	if strings.TrimSpace(service) == "" || strings.TrimSpace(instance) == "" {
		return fmt.Errorf("%w: service %q and instance %q must not be empty", ErrInvalid, service, instance)
	}
	return nil
}

// subscribers is the local fan-out of a node: bounded channels, a
// subscriber that lets its buffer fill, or lets the payloads waiting in
// it exceed maxBytes, is dropped (its channel closed) rather than slowing
// the others or holding the node's memory (issue 36: two collectors
// behind their bus held their backlog there).
type subscribers struct {
	buffer   int
	maxBytes int64
	mu       sync.Mutex
	closed   bool
	subs     map[string]map[chan Message]*subQueue
	drops    int
}

// subQueue is what a subscriber's channel holds: the sizes of the
// messages delivered to it, oldest first, of which the first len(sizes) -
// len(ch) have been received (a channel is first in, first out); bytes is
// the sum of sizes.
type subQueue struct {
	sizes []int
	bytes int64
}

// held is the payload bytes of the messages still in ch.
func (q *subQueue) held(ch chan Message) int64 {
	for len(q.sizes) > len(ch) {
		q.bytes -= int64(q.sizes[0])
		q.sizes = q.sizes[1:]
	}
	return q.bytes
}

func newSubscribers(buffer int, maxBytes int64) *subscribers {
	return &subscribers{buffer: buffer, maxBytes: maxBytes, subs: map[string]map[chan Message]*subQueue{}}
}

func (s *subscribers) add(channel string) (<-chan Message, func()) {
	ch := make(chan Message, s.buffer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(ch)
		return ch, func() {}
	}
	if s.subs[channel] == nil {
		s.subs[channel] = map[chan Message]*subQueue{}
	}
	s.subs[channel][ch] = &subQueue{}
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[channel][ch]; ok {
			delete(s.subs[channel], ch)
			close(ch)
		}
	}
}

func (s *subscribers) deliver(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(m.Payload)
	for ch, q := range s.subs[m.Channel] {
		if s.maxBytes > 0 && q.held(ch)+int64(n) > s.maxBytes && len(ch) > 0 {
			s.dropLocked(m.Channel, ch)
			continue
		}
		select {
		case ch <- m:
			q.sizes = append(q.sizes, n)
			q.bytes += int64(n)
		default:
			s.dropLocked(m.Channel, ch)
		}
	}
}

func (s *subscribers) dropLocked(channel string, ch chan Message) {
	delete(s.subs[channel], ch)
	close(ch)
	s.drops++
}

// stats returns the payload bytes waiting in every subscriber's channel
// and the subscribers dropped so far.
func (s *subscribers) stats() (held int64, drops int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.subs {
		for ch, q := range set {
			held += q.held(ch)
		}
	}
	return held, s.drops
}

// gap tells every subscriber that messages may have been missed.
func (s *subscribers) gap(from string) {
	s.mu.Lock()
	chans := make([]string, 0, len(s.subs))
	for c := range s.subs {
		chans = append(chans, c)
	}
	s.mu.Unlock()
	for _, c := range chans {
		s.deliver(Message{Channel: c, From: from, Gap: true})
	}
}

func (s *subscribers) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, set := range s.subs {
		for ch := range set {
			close(ch)
		}
	}
	clear(s.subs)
}

// Local is the Bus of a single collector (an SQLite deployment): there is
// no other node to publish to, Route reaches this node's subscribers for
// the instances claimed here, and it is the leader of every singleton.
type Local struct {
	id     string
	subs   *subscribers
	mu     sync.Mutex
	claims map[[2]string]bool
}

var _ Bus = (*Local)(nil)

// NewLocal returns the single node's Bus.
func NewLocal() *Local {
	return &Local{id: "local", subs: newSubscribers(1024, 0), claims: map[[2]string]bool{}}
}

// NodeID is "local".
func (l *Local) NodeID() string { return l.id }

// SubscriberStats is Postgres.SubscriberStats of the single node.
func (l *Local) SubscriberStats() (heldBytes int64, dropped int) { return l.subs.stats() }

// Publish checks channel and sends nothing: there is no other node.
func (l *Local) Publish(_ context.Context, channel string, _ []byte) error {
	return checkChannel(channel)
}

// Subscribe returns the messages routed to this node on channel.
func (l *Local) Subscribe(channel string) (<-chan Message, func()) { return l.subs.add(channel) }

// Claim records that the instance is connected here.
func (l *Local) Claim(_ context.Context, service, instance string) error {
	if err := checkInstance(service, instance); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims[[2]string{service, instance}] = true
	return nil
}

// Release forgets a claim.
func (l *Local) Release(_ context.Context, service, instance string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.claims, [2]string{service, instance})
	return nil
}

// Claims lists this node's claims (the only node).
func (l *Local) Claims(context.Context) ([]Claim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Claim, 0, len(l.claims))
	for k := range l.claims {
		out = append(out, Claim{Service: k[0], Instance: k[1], Node: l.id})
	}
	return out, nil
}

// Route delivers payload to this node's subscribers of channel when the
// instance is claimed here, and returns ErrNoRoute (it is offline)
// otherwise.
func (l *Local) Route(_ context.Context, channel, service, instance string, payload []byte) error {
	if err := checkChannel(channel); err != nil {
		return err
	}
	if err := checkInstance(service, instance); err != nil {
		return err
	}
	l.mu.Lock()
	held := l.claims[[2]string{service, instance}]
	l.mu.Unlock()
	if !held {
		return ErrNoRoute
	}
	l.subs.deliver(Message{Channel: channel, From: l.id, Payload: payload})
	return nil
}

// Lead runs fn at once with ctx: the single node leads everything.
func (l *Local) Lead(ctx context.Context, _ string, fn func(context.Context)) error {
	fn(ctx)
	<-ctx.Done()
	return nil
}

// Close closes the subscribers' channels.
func (l *Local) Close() error {
	l.subs.close()
	return nil
}

// ForStore returns the Bus for the store at db (the --db value): a
// Postgres bus for a PostgreSQL DSN (a postgres:// or postgresql:// URL or
// libpq's keyword/value form, as the store tells them: dsn.IsPostgres),
// with cfg (its URL set to db), and Local for anything else (an SQLite
// file, one node). The store at db is opened (and so migrated) first.
func ForStore(ctx context.Context, db string, cfg Config) (Bus, error) {
	if !dsn.IsPostgres(db) {
		return NewLocal(), nil
	}
	cfg.URL = db
	return Open(ctx, cfg)
}
