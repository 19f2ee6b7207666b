// Package hystrixgo reports afex/hystrix-go commands to cbdash with their
// exact counts and transitions: one registration plugs a metric collector
// into hystrix-go (metricCollector.Registry), and each command is
// registered with the agent (sdk/agent) the first time hystrix-go creates
// its circuit.
//
//	ad := cbhystrix.Register(a, cbhystrix.Options{}) // before the first hystrix.Do
//	defer ad.Close()
//	err := hystrix.Do("search", func() error { return fetch(ctx) }, nil)
//
// (imported as cbhystrix beside github.com/afex/hystrix-go/hystrix.)
//
// Reading a hystrix-go service's Hystrix stream instead (internal/source)
// needs no change to the service, but that stream carries 10-second
// rolling counts only, from which per-second counts can only be
// estimated; through this adapter every call is counted once, exactly as
// hystrix-go itself counts it.
//
// Counts come from hystrix-go's MetricResult, one per call, which
// hystrix-go hands every registered collector on the command's metrics
// goroutine: a success or a failure (the run returned an error) is an
// admitted call timed by hystrix-go's RunDuration; a timeout is admitted,
// a failure, and timed at the command's Timeout (hystrix-go abandons the
// run and reports no duration); a short-circuit (the circuit is open) is
// RejectedOpen and a rejection (MaxConcurrentRequests reached) is
// RejectedBulkhead, neither admitted; a call whose context was canceled
// or ran out (hystrix-go counts it as neither a success nor an error) is
// admitted and Ignored. Fallbacks are FallbackSuccesses or
// FallbackFailures. Slow calls are not judged (hystrix-go has no such
// rule).
//
// Transitions: hystrix-go tells a collector nothing when its circuit
// opens, and Reset when it closes. The adapter reports closed to open
// (cause library_rule, with ErrorPercentThreshold as the threshold and
// SleepWindow as the open duration) when it sees the circuit open: it asks
// the circuit (CircuitBreaker.IsOpen, as hystrix-go's own StreamHandler
// does every second) from its own goroutine as soon as a short-circuited
// call is reported, and every Options.PollInterval besides (250 ms by
// default; for an open that no call saw: IsOpen itself opens an unhealthy
// circuit, as the next call would). It never calls hystrix-go from the
// collector, which hystrix-go calls under its locks. At is the start of the first short-circuited call
// when one was reported, else when the poll saw it. Open to closed (cause
// probes_succeeded) is reported exactly at Reset, which hystrix-go calls
// as the circuit closes, before the success that closed it is counted
// (any success reported while open closes hystrix-go's circuit, even one
// of a call admitted before it opened, so an open can last milliseconds).
// An open that closed again before the adapter looked is still reported,
// open and closed, when a short-circuit or the Reset tells of it: a Reset
// after a short-circuit the adapter had not confirmed yet, or a
// short-circuited call that started before the last Reset. hystrix-go
// has no half-open state: once SleepWindow has passed it lets a single
// test call through while the circuit stays open (its success closes the
// circuit, its failure leaves it open for another SleepWindow), so cbdash
// shows the circuit open until it closes and a failed test call as a
// failure, with no transition. hystrix.Flush resets every collector: an
// open circuit is then reported closed (the next call gets a new circuit,
// which the adapter's next look at the command creates).
//
// hystrix-go has no way to hold a circuit open or closed from outside (its
// force-open toggle is unexported), so these breakers are declared with
// holds_unsupported and the agent refuses operator commands for them. The
// dashboard shows hystrix-go's own settings for the command (Timeout,
// MaxConcurrentRequests, RequestVolumeThreshold, SleepWindow,
// ErrorPercentThreshold), as hystrix-go applies them when the circuit is
// created (ConfigureCommand after that is not shown).
//
// hystrix-go builds a circuit's collectors when it creates the circuit, at
// the command's first call, and keeps them: Register before the first
// call of every command to be reported (a command whose circuit already
// exists is not seen until hystrix.Flush), and note that a registered
// collector cannot be removed (after Close it ignores every call).
package hystrixgo

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	metricCollector "github.com/afex/hystrix-go/hystrix/metric_collector"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Library is the library name declared in the hello.
const Library = "afex/hystrix-go"

// DefaultPollInterval is how often, by default, the adapter asks each
// command's circuit whether it is open.
const DefaultPollInterval = 250 * time.Millisecond

// rollingWindow is hystrix-go's health window: 10 one-second buckets.
const rollingWindow = 10 * time.Second

// Registrar is where the adapter registers each command: an
// *agent.Agent.
type Registrar interface {
	RegisterSource(agent.Source) error
}

// Options configure the adapter (hystrix-go's own configuration stays in
// hystrix.ConfigureCommand). The zero value works.
type Options struct {
	// Clock stamps transitions and snapshots. nil means the system clock.
	// hystrix-go itself, which times the calls, runs on the system clock,
	// and so does the poll.
	Clock breaker.Clock
	// PollInterval is how often each command's circuit is asked whether
	// it is open (see the package doc). 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Name gives the breaker name for a hystrix-go command; "" (or a
	// panic) leaves the command out. nil means the command's name. It is
	// called once per circuit hystrix-go creates, which it must not call.
	Name func(command string) string
	// OnError, if set, is told of a command the agent refused to register
	// (agent.RegisterSource's error: a bad name, too many breakers, a
	// closed agent); that command is then not reported. It is called on
	// the goroutine of the command's first call, which hystrix-go is
	// creating the circuit for: it must not call hystrix-go.
	OnError func(command string, err error)
}

// Adapter is a registration with hystrix-go and an agent (see Register).
// It is safe for concurrent use.
type Adapter struct {
	reg          Registrar
	o            Options
	pollInterval time.Duration
	closed       atomic.Bool
	nudge        chan struct{} // cap 1: a short-circuit was reported
	stop, done   chan struct{}
	closeOnce    sync.Once

	mu   sync.Mutex // guards cmds and list
	cmds map[string]*command
	list []*command // in creation order, for the poll
}

// Register plugs the adapter's metric collector into hystrix-go
// (metricCollector.Registry.Register, for every circuit created from now
// on), registers each command with reg (an *agent.Agent) when hystrix-go
// creates its circuit, and starts the goroutine that asks the circuits
// whether they are open. Close stops it.
func Register(reg Registrar, o Options) *Adapter {
	ad := &Adapter{reg: reg, o: o, pollInterval: o.PollInterval, nudge: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), cmds: map[string]*command{}}
	if ad.pollInterval <= 0 {
		ad.pollInterval = DefaultPollInterval
	}
	metricCollector.Registry.Register(ad.collector)
	go ad.poll()
	return ad
}

// Close stops the adapter's goroutine (waiting for it to end) and makes
// its collectors ignore every call from then on (hystrix-go keeps them).
// The commands stay registered with the agent. It is idempotent.
func (ad *Adapter) Close() {
	ad.closeOnce.Do(func() {
		ad.closed.Store(true)
		close(ad.stop)
		<-ad.done
	})
}

// Source returns the agent.Source the adapter made for a hystrix-go
// command, or nil before hystrix-go created its circuit (or when it was
// left out).
func (ad *Adapter) Source(command string) agent.Source {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if c := ad.cmds[command]; c != nil {
		return c
	}
	return nil
}

// collector is the factory given to hystrix-go: it runs in
// hystrix.GetCircuit, under hystrix-go's lock of its circuits, once per
// circuit it creates (again for a command after hystrix.Flush).
func (ad *Adapter) collector(name string) metricCollector.MetricCollector {
	if ad.closed.Load() {
		return nop{}
	}
	breakerName := ad.breakerName(name)
	ad.mu.Lock()
	c, seen := ad.cmds[name]
	if !seen {
		if breakerName != "" {
			c = newCommand(ad, name, breakerName)
			ad.list = append(ad.list, c)
		}
		ad.cmds[name] = c // nil: left out
	}
	ad.mu.Unlock()
	if c == nil {
		return nop{}
	}
	if !seen {
		if err := ad.reg.RegisterSource(c); err != nil && ad.o.OnError != nil {
			func() {
				defer func() { _ = recover() }() // not into hystrix-go's call
				ad.o.OnError(name, err)
			}()
		}
	}
	return &collector{c: c}
}

// breakerName is Options.Name's name for a command ("" when it panics:
// the command is left out rather than the panic passed into hystrix-go's
// call).
func (ad *Adapter) breakerName(command string) (name string) {
	if ad.o.Name == nil {
		return command
	}
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	return ad.o.Name(command)
}

// poll asks every command's circuit whether it is open, every
// pollInterval and whenever a short-circuit was reported.
func (ad *Adapter) poll() {
	defer close(ad.done)
	tick := time.NewTicker(ad.pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ad.stop:
			return
		case <-tick.C:
		case <-ad.nudge:
		}
		ad.mu.Lock()
		list := ad.list
		ad.mu.Unlock()
		for _, c := range list {
			if ad.closed.Load() {
				return
			}
			c.check()
		}
	}
}

// command is one hystrix-go command as an agent.Source.
type command struct {
	ad      *Adapter
	name    string // hystrix-go's
	meter   *adapter.Meter
	cfg     protocol.BreakerConfig
	timeout time.Duration // hystrix-go's Timeout, the latency of a timed-out call
	sleep   time.Duration
	percent int

	open atomic.Bool // what the adapter last reported; read without mu

	// mu orders the adapter's transitions: from Reset (which hystrix-go
	// calls under its own locks), from Update and from the poll. It is
	// never held while calling hystrix-go. Times are hystrix-go's clock.
	mu        sync.Mutex
	epoch     uint64    // Resets so far
	lastReset time.Time // the last Reset after the circuit's creation
	prevReset time.Time // the one before
	// unexplained: the last Reset came while the adapter said closed and
	// had seen no short-circuit (an open it missed, or hystrix.Flush).
	unexplained bool
	shortAt     time.Time // the earliest start of a call short-circuited since lastReset, while closed
}

func newCommand(ad *Adapter, name, breakerName string) *command {
	st := settings(name)
	c := &command{ad: ad, name: name, meter: adapter.NewMeter(breakerName, ad.o.Clock),
		timeout: st.Timeout, sleep: st.SleepWindow, percent: st.ErrorPercentThreshold}
	c.cfg = protocol.BreakerConfig{
		Name:                     breakerName,
		WindowKind:               "time",
		WindowMillis:             rollingWindow.Milliseconds(),
		WindowBuckets:            10,
		FailureRateThreshold:     float64(st.ErrorPercentThreshold),
		MinimumCalls:             int(min(st.RequestVolumeThreshold, uint64(1<<31-1))),
		OpenDurationMillis:       st.SleepWindow.Milliseconds(),
		HalfOpenMaxCalls:         1,
		HalfOpenSuccessThreshold: 1,
		CallTimeoutMillis:        st.Timeout.Milliseconds(),
		MaxConcurrent:            st.MaxConcurrentRequests,
		Library:                  Library,
		Settings: protocol.NewSettings(map[string]string{
			"Timeout":                st.Timeout.String(),
			"MaxConcurrentRequests":  strconv.Itoa(st.MaxConcurrentRequests),
			"RequestVolumeThreshold": strconv.FormatUint(st.RequestVolumeThreshold, 10),
			"SleepWindow":            st.SleepWindow.String(),
			"ErrorPercentThreshold":  strconv.Itoa(st.ErrorPercentThreshold),
		}),
	}
	return c
}

// settings are the command's settings as hystrix-go applies them: those
// given to ConfigureCommand, else hystrix-go's defaults (which it applies
// at the command's first call, just after creating the collectors).
func settings(name string) hystrix.Settings {
	if st, ok := hystrix.GetCircuitSettings()[name]; ok && st != nil {
		return *st
	}
	return hystrix.Settings{
		Timeout:                time.Duration(hystrix.DefaultTimeout) * time.Millisecond,
		MaxConcurrentRequests:  hystrix.DefaultMaxConcurrent,
		RequestVolumeThreshold: uint64(hystrix.DefaultVolumeThreshold),
		SleepWindow:            time.Duration(hystrix.DefaultSleepWindow) * time.Millisecond,
		ErrorPercentThreshold:  hystrix.DefaultErrorPercentThreshold,
	}
}

// Describe returns the breaker's configuration for the hello: hystrix-go's
// settings by their names, and the protocol's equivalents (a 10-second
// time window, the error percentage as the failure-rate threshold,
// RequestVolumeThreshold as the minimum calls, SleepWindow as the open
// duration, a single test call as the half-open probe).
func (c *command) Describe() protocol.BreakerConfig { return c.cfg }

// Snapshot returns the state the adapter last reported and its cumulative
// counts. It does not call hystrix-go.
func (c *command) Snapshot() breaker.Snapshot {
	st := breaker.Closed
	if c.open.Load() {
		st = breaker.Open
	}
	return c.meter.Snapshot(st)
}

// Subscribe registers fn for every transition (see agent.Source).
func (c *command) Subscribe(fn func(breaker.Transition)) (cancel func()) {
	return c.meter.Subscribe(fn)
}

// at is the moment t of hystrix-go's clock (the system clock) on the
// adapter's clock.
func (c *command) at(t time.Time) time.Time { return c.meter.Now().Add(-time.Since(t)) }

func (c *command) opened(at time.Time) {
	c.open.Store(true)
	c.meter.Transition(breaker.Transition{From: breaker.Closed, To: breaker.Open, At: at, OpenDuration: c.sleep,
		Cause: breaker.Cause{Kind: breaker.CauseKind(protocol.CauseLibraryRule), Threshold: float64(c.percent)}})
}

func (c *command) closed(at time.Time) {
	c.open.Store(false)
	c.meter.Transition(breaker.Transition{From: breaker.Open, To: breaker.Closed, At: at,
		Cause: breaker.Cause{Kind: breaker.CauseProbesSucceeded}})
}

// check asks hystrix-go whether the command's circuit is open and reports
// closed to open when it is and no Reset came in between (at the start of
// the first call short-circuited, when one was reported, else now). It
// runs on the poll goroutine only.
func (c *command) check() {
	for {
		c.mu.Lock()
		epoch, open := c.epoch, c.open.Load()
		c.mu.Unlock()
		if open {
			return // open to closed is reported at Reset
		}
		// GetCircuit rather than a kept pointer: after hystrix.Flush the
		// command's circuit is a new one.
		cb, _, err := hystrix.GetCircuit(c.name)
		if err != nil || !cb.IsOpen() {
			return
		}
		c.mu.Lock()
		if c.epoch == epoch {
			at := c.meter.Now()
			if s := c.at(c.shortAt); !c.shortAt.IsZero() && s.Before(at) {
				at = s
			}
			c.opened(at)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock() // it closed meanwhile: ask again
	}
}

// shortCircuited is told of a call short-circuited while the adapter said
// closed, which started at start: the circuit was open then. A call that
// started before the last Reset tells of an open the adapter missed
// before it (reported now, from start to that Reset, unless the adapter
// reported anything since); a later one wakes the poll to confirm.
func (c *command) shortCircuited(start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.open.Load():
	case !c.lastReset.IsZero() && !start.After(c.lastReset):
		// Of the open before the last Reset (an older one's would come
		// out of order: left out).
		if c.unexplained && start.After(c.prevReset) {
			c.unexplained = false
			c.opened(c.at(start))
			c.closed(c.at(c.lastReset))
		}
	default:
		if c.shortAt.IsZero() || start.Before(c.shortAt) {
			c.shortAt = start
		}
		select {
		case c.ad.nudge <- struct{}{}:
		default:
		}
	}
}

// reset is hystrix-go's Reset after the circuit's creation: the circuit
// closes (or hystrix.Flush forgets it). hystrix-go calls it only when the
// circuit was open (or on Flush): while the adapter said closed with a
// short-circuit seen, it missed the open, and reports it now.
func (c *command) reset() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.unexplained = false
	switch {
	case c.open.Load():
		c.closed(c.at(now))
	case !c.shortAt.IsZero():
		c.opened(c.at(c.shortAt))
		c.closed(c.at(now))
	default:
		c.unexplained = true
	}
	c.prevReset, c.lastReset, c.shortAt = c.lastReset, now, time.Time{}
}

// collector is the metric collector hystrix-go keeps for one circuit of a
// command.
type collector struct {
	c       *command
	created atomic.Bool // the first Reset, as hystrix-go creates the circuit, came
}

// Update counts one call's result. hystrix-go calls it on the command's
// metrics goroutine, holding its metrics lock (which Reset waits for): it
// only adds to counters and, for a short-circuit while closed, takes the
// command's short lock (never held across a call into hystrix-go) and
// wakes the poll without waiting.
func (k *collector) Update(r metricCollector.MetricResult) {
	c := k.c
	if c.ad.closed.Load() {
		return
	}
	m := c.meter
	switch {
	case r.Successes > 0:
		m.Record(breaker.Success, r.RunDuration)
	case r.Failures > 0:
		m.Record(breaker.Failure, r.RunDuration)
	case r.Timeouts > 0:
		m.Record(breaker.Timeout, c.timeout)
	case r.ShortCircuits > 0:
		m.Reject(adapter.RejectedOpen)
		if !c.open.Load() {
			c.shortCircuited(time.Now().Add(-r.TotalDuration))
		}
	case r.Rejects > 0:
		m.Reject(adapter.RejectedBulkhead)
	default: // ContextCanceled, ContextDeadlineExceeded
		m.Record(breaker.Canceled, 0)
	}
	switch {
	case r.FallbackSuccesses > 0:
		m.Fallback(true)
	case r.FallbackFailures > 0:
		m.Fallback(false)
	}
}

// Reset is called by hystrix-go when the circuit closes (under its locks:
// it does not call hystrix-go), when it is created and on hystrix.Flush.
// The adapter's counts go on.
func (k *collector) Reset() {
	if !k.created.Swap(true) || k.c.ad.closed.Load() {
		return
	}
	k.c.reset()
}

// nop is the collector of a command left out or made after Close.
type nop struct{}

func (nop) Update(metricCollector.MetricResult) {}
func (nop) Reset()                              {}
