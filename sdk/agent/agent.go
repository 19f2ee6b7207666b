package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Version is the SDK version the agent reports in its hello.
const Version = "0.1.0"

// Errors of the Agent's methods.
var (
	// ErrClosed is returned by Register, Start and Close after Close.
	ErrClosed = errors.New("agent: closed")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("agent: already started")
	// ErrDuplicateBreaker is returned by Register for a second breaker
	// with the same name.
	ErrDuplicateBreaker = errors.New("agent: a breaker with this name is already registered")
	// ErrTooManyBreakers is returned by Register beyond
	// protocol.MaxBreakersPerHello breakers (counting unregistered ones
	// whose last reports are not yet acknowledged).
	ErrTooManyBreakers = errors.New("agent: too many breakers")
	// ErrNotRegistered is returned by Unregister for a breaker that is not
	// registered.
	ErrNotRegistered = errors.New("agent: breaker not registered")
	// ErrNotFlushed is wrapped by Close's error when its context ended
	// before the collector acknowledged everything.
	ErrNotFlushed = errors.New("agent: not everything reached the collector")
)

// Agent reports the breakers registered with it to a cbdash collector over
// one websocket connection, and applies the operator commands the
// collector sends back. See docs/protocol.md for what goes over the wire.
//
// Its methods are safe for concurrent use. The breakers' hot path is never
// touched: the agent subscribes to transitions (its observer only queues
// them) and reads each breaker's Snapshot on its own goroutine. Between
// Start and Close an Agent runs two goroutines, plus one reading the
// connection while it is up; Close stops and waits for all of them.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	startedAt int64 // Unix ms, identifies this run of the instance together with Instance
	out       *outbox
	inbox     inbox
	queueMu   sync.Mutex // makes inbox-to-outbox moves atomic, see queue

	wake      chan struct{}      // cap 1: the inbox has transitions
	sendReady chan struct{}      // cap 1: the outbox may have something to write
	cmds      chan inCommand     // reader -> owner
	final     chan chan struct{} // Close -> owner: take a last report

	mu        sync.Mutex // guards the fields below; taken after queueMu when both are
	breakers  []*tracked
	byName    map[string]*tracked
	retired   []*tracked // unregistered, still declared in hellos (see retire.go)
	forgotten forgottenReports
	helloGen  uint64 // incremented when the declared breakers change: the collector must hear a new hello (see item.hello)
	started   bool
	closed    bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	connected  atomic.Bool
	collector  atomic.Pointer[string] // the URL of the collector connected to, nil when none
	reconnects atomic.Uint64
}

// tracked is a registered breaker. src, cmd and cfg are immutable; rep is
// owned by the agent's report goroutine.
type tracked struct {
	src   Source
	cmd   Commander        // nil: the breaker cannot apply commands
	b     *breaker.Breaker // the sdk/breaker Breaker, nil for a Source of another library
	cfg   protocol.BreakerConfig
	unsub func()
	rep   reportState
	final bool // unregistered and its last report taken; guarded by Agent.mu
}

// Source is a circuit breaker of another library that an agent reports:
// an adapter (module sdk/adapter/<library>) implements it around the
// library's breaker and registers it with RegisterSource. An sdk/breaker
// Breaker needs no Source: Register takes it as it is.
//
// Its methods may be called from any goroutine and must be safe for
// concurrent use; none may block.
type Source interface {
	// Describe returns the breaker's name and configuration for the hello:
	// the protocol fields the library has an equivalent for, Library and
	// the library's own Settings. RegisterSource calls it once.
	// HoldsUnsupported is set by the agent (see Commander).
	Describe() protocol.BreakerConfig
	// Snapshot returns the breaker's state and cumulative counters now,
	// as breaker.Breaker.Snapshot does: Totals and Latency (counts per
	// breaker.LatencyBounds bucket, or nil) never decrease. The agent
	// reports their deltas every Config.ReportInterval.
	Snapshot() breaker.Snapshot
	// Subscribe registers fn to be told of every transition from now on,
	// as it happens, and returns a function that unsubscribes it; the
	// contract of breaker.Breaker.Subscribe (in order, outside locks,
	// never again after cancel returns). fn only queues.
	Subscribe(fn func(breaker.Transition)) (cancel func())
}

// Commander is implemented by a Source whose library can apply operator
// commands (holds): Apply has the contract of breaker.Breaker.Apply, and
// the resulting state and any transition it made are reported as for an
// sdk/breaker Breaker. A Source that is not a Commander is declared with
// holds_unsupported in the hello, and the agent refuses its commands
// ("holds not supported").
type Commander interface {
	Apply(cmd breaker.Command) (breaker.State, error)
}

// native is an sdk/breaker Breaker as a Source.
type native struct{ *breaker.Breaker }

func (n native) Describe() protocol.BreakerConfig { return breakerConfig(n.Name(), n.Config()) }

// New returns an Agent for cfg, which is validated (the error names the
// bad field and wraps ErrInvalidConfig). The agent does nothing until
// Start.
func New(cfg Config) (*Agent, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       c,
		log:       c.Logger.With("component", "cbdash-agent", "service", c.Service, "instance", c.Instance),
		startedAt: c.Clock.Now().UnixMilli(),
		out:       newOutbox(c.BufferBytes),
		wake:      make(chan struct{}, 1),
		sendReady: make(chan struct{}, 1),
		cmds:      make(chan inCommand),
		final:     make(chan chan struct{}),
		byName:    map[string]*tracked{},
	}
	a.inbox.limit = inboxLimit
	return a, nil
}

// Register adds b to the breakers the agent reports. It may be called
// before or after Start; after Start the agent sends a new hello on its
// connection, declaring b, before any report of b. Its
// counters are reported from zero: the first window report of b carries
// everything b counted before it was registered. A breaker registered
// again after Unregister goes on from its last report instead, so that no
// call is reported twice (its first report then covers the time it was
// not registered).
//
// Errors: ErrInvalidConfig (a name the collector would refuse: blank,
// longer than protocol.MaxNameLen bytes, with a control, bidirectional,
// invisible or non-ASCII space character, a space at either end or a
// combining mark first; see protocol.CheckName),
// ErrDuplicateBreaker, ErrTooManyBreakers, ErrClosed.
func (a *Agent) Register(b *breaker.Breaker) error {
	if err := checkName("breaker name", b.Name()); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return a.register(b.Name(), b, func() *tracked {
		return &tracked{src: native{b}, cmd: b, b: b, cfg: native{b}.Describe()}
	})
}

// RegisterSource adds a breaker of another library, seen through an
// adapter, to the breakers the agent reports, as Register does for an
// sdk/breaker Breaker. Operator commands for it are applied when s is also
// a Commander, and refused otherwise (the hello then says
// holds_unsupported). A Source is not revived by registering it again: its
// reports start from its counters then.
//
// Errors: ErrInvalidConfig (a bad name from Describe), ErrDuplicateBreaker,
// ErrTooManyBreakers, ErrClosed.
func (a *Agent) RegisterSource(s Source) error {
	cfg := s.Describe()
	cmd, _ := s.(Commander)
	cfg.HoldsUnsupported = cmd == nil
	if err := checkName("breaker name", cfg.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return a.register(cfg.Name, nil, func() *tracked { return &tracked{src: s, cmd: cmd, cfg: cfg} })
}

// register adds the breaker named name: b, when it is an sdk/breaker one
// (which may be revived from the retired ones), else the one mk makes.
func (a *Agent) register(name string, b *breaker.Breaker, mk func() *tracked) error {
	a.queueMu.Lock() // for pruneRetiredLocked
	defer a.queueMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.byName[name] != nil:
		return fmt.Errorf("%w: %q", ErrDuplicateBreaker, name)
	}
	var t *tracked
	if b != nil {
		t = a.reviveLocked(b)
	}
	if t == nil {
		if a.declaredLocked(name) == nil && a.declaredCountLocked() >= protocol.MaxBreakersPerHello {
			a.pruneRetiredLocked()
		}
		if a.declaredLocked(name) == nil && a.declaredCountLocked() >= protocol.MaxBreakersPerHello {
			return fmt.Errorf("%w: at most %d", ErrTooManyBreakers, protocol.MaxBreakersPerHello)
		}
		t = mk()
		rep, ok := reportState{}, false
		if b != nil {
			rep, ok = a.forgotten.take(b)
		}
		if ok {
			t.rep = rep
		} else {
			t.rep.since = a.cfg.Clock.Now()
		}
	}
	a.breakers = append(a.breakers, t)
	a.byName[name] = t
	a.helloGen++
	// Subscribing under a.mu is safe: sources call the observer outside
	// their own locks and the observer only touches the inbox.
	t.unsub = t.src.Subscribe(a.observe)
	if b != nil && len(b.Config().Shadows) > 0 { // its shadows' would-be transitions, sent as shadow_transitions
		live, shadows := t.unsub, b.SubscribeShadows(a.observe)
		t.unsub = func() { live(); shadows() }
	}
	signal(a.sendReady) // the connection goroutine sends the new hello
	return nil
}

// Start starts the agent's goroutines: it connects to the collector
// (retrying with backoff while it cannot), reports, and applies commands
// until Close. It does not block.
//
// Errors: ErrStarted, ErrClosed.
func (a *Agent) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.started:
		return ErrStarted
	}
	a.started = true
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(2)
	go a.reportLoop(ctx)
	go a.connLoop(ctx)
	return nil
}

// Close stops reporting: it takes a last window report of every breaker,
// unsubscribes from them, tries to get everything acknowledged by the
// collector until ctx ends, then closes the connection and stops every
// goroutine of the agent (it waits for them). It returns an error
// wrapping ErrNotFlushed and ctx's error if ctx ended first, and
// ErrClosed when called again.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.closed = true
	started := a.started
	a.mu.Unlock()
	if !started {
		a.unsubscribe()
		return nil
	}
	var err error
	done := make(chan struct{})
	select {
	case a.final <- done:
		<-done
		select {
		case <-a.out.drain():
		case <-ctx.Done():
			s := a.out.stats()
			err = fmt.Errorf("%w: %d reports pending, %d batches unacknowledged: %w",
				ErrNotFlushed, s.pending, s.unsent, ctx.Err())
		}
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrNotFlushed, ctx.Err())
	}
	a.cancel()
	a.wg.Wait()
	a.unsubscribe() // if ctx ended before the last report
	return err
}

// unsubscribe stops the transitions of every breaker from reaching the
// agent. It may be called more than once.
func (a *Agent) unsubscribe() {
	for _, t := range a.registered() {
		t.unsub()
	}
}

// Stats are counters of an agent's delivery since New.
type Stats struct {
	Sent  uint64 // batches written, resends included
	Acked uint64 // batches the collector acknowledged
	// Dropped counts what was lost: window reports dropped or merged under
	// buffer pressure, batches the collector refused, and (last resort)
	// transitions and command results.
	Dropped       protocol.Dropped
	Reconnects    uint64 // connections established after the first
	BufferedBytes int    // encoded bytes held for the collector, <= Config.BufferBytes
	Connected     bool   // a connection is up and the collector has welcomed the agent
	// Collector is the URL (one of Config.URLs, or Config.URL) of the
	// collector the agent is connected to; "" when not Connected.
	Collector string
}

// Stats returns the agent's counters. It is safe to call at any time.
func (a *Agent) Stats() Stats {
	s := a.out.stats()
	var url string
	if p := a.collector.Load(); p != nil {
		url = *p
	}
	return Stats{
		Collector: url,
		Sent:      s.sent, Acked: s.acked, Dropped: s.dropped,
		Reconnects: a.reconnects.Load(), BufferedBytes: s.bytes, Connected: a.connected.Load(),
	}
}

// hello returns the hello for the breakers declared now (registered, or
// unregistered with reports still to deliver), and the generation it
// describes.
func (a *Agent) hello() (protocol.Hello, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version,
		Service: a.cfg.Service, Instance: a.cfg.Instance, SDKVersion: Version,
		Labels: a.cfg.Labels, StartedAt: a.startedAt,
		Breakers: make([]protocol.BreakerConfig, 0, len(a.breakers)+len(a.retired)),
	}
	a.eachDeclaredLocked(func(t *tracked) { h.Breakers = append(h.Breakers, t.cfg) })
	return h, a.helloGen
}

func (a *Agent) currentHelloGen() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.helloGen
}

// lookup returns the registered breaker called name, or nil.
func (a *Agent) lookup(name string) *tracked {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byName[name]
}

// registered returns the breakers registered now, in registration order.
func (a *Agent) registered() []*tracked {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*tracked(nil), a.breakers...)
}

// signal wakes the receiver of c without ever blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
