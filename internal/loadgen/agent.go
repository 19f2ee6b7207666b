package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// agent is one simulated instance: one connection, one sender goroutine
// (the only writer) and one reader goroutine (acks).
type agent struct {
	r         *run
	conn      *websocket.Conn
	instance  string
	server    int // index of its collector in Config.AgentURLs (0 without)
	startedAt int64
	names     []string
	states    []string
	gens      []uint64

	mu      sync.Mutex
	seq     uint64
	windows map[uint64]int // windows per unacknowledged seq
}

func newAgent(r *run, conn *websocket.Conn, instance string) *agent {
	n := r.cfg.BreakersPerInstance
	a := &agent{
		r: r, conn: conn, instance: instance, startedAt: r.cfg.Clock.Now().UnixMilli(),
		names: make([]string, n), states: make([]string, n), gens: make([]uint64, n),
		windows: make(map[uint64]int),
	}
	for i := range n {
		a.names[i] = fmt.Sprintf("dep-%02d", i)
		a.states[i] = protocol.StateClosed
	}
	return a
}

func (a *agent) hello() protocol.Hello {
	h := protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version, Service: a.r.cfg.Service, Instance: a.instance,
		SDKVersion: "loadgen", StartedAt: a.startedAt, Labels: map[string]string{"region": "local"},
	}
	for _, n := range a.names {
		h.Breakers = append(h.Breakers, protocol.BreakerConfig{
			Name: n, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 20,
			OpenDurationMillis: 5000, HalfOpenMaxCalls: 3, HalfOpenSuccessThreshold: 3,
		})
	}
	return h
}

func (a *agent) write(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.conn.Write(wctx, websocket.MessageText, data)
}

func (a *agent) handshake(ctx context.Context) error {
	if err := a.write(ctx, a.hello()); err != nil {
		return err
	}
	_, data, err := a.conn.Read(ctx)
	if err != nil {
		return err
	}
	var w struct {
		protocol.Welcome
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(data, &w); err != nil || w.Type != protocol.TypeWelcome {
		return fmt.Errorf("no welcome: %s", data)
	}
	return nil
}

// sendLoop sends window reports every Interval (starting at a random
// offset, so instances do not all report in the same millisecond) and
// transitions at random times.
func (a *agent) sendLoop(ctx context.Context) {
	cfg := a.r.cfg
	first := time.NewTimer(jitter(cfg.Interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	flip := time.NewTimer(cfg.TransitionEvery/2 + jitter(cfg.TransitionEvery))
	defer flip.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			err = a.sendWindows(ctx)
		case <-flip.C:
			flip.Reset(cfg.TransitionEvery/2 + jitter(cfg.TransitionEvery))
			err = a.sendTransition(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				a.r.errors.Add(1)
			}
			return
		}
	}
}

func (a *agent) next(windows int) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	if windows > 0 {
		a.windows[a.seq] = windows
	}
	return a.seq
}

func (a *agent) sendWindows(ctx context.Context) error {
	b := windowBatch(a.names, a.states, a.r.cfg.Interval, a.r.cfg.Clock.Now().UnixMilli())
	b.Seq = a.next(len(b.Windows))
	if a.r.measuring.Load() {
		a.r.offered.Add(int64(len(b.Windows)))
	}
	return a.write(ctx, b)
}

// windowBatch is one batch of window reports, one per breaker, ending at
// now (Unix ms), its counts random (80-119 successes, 0-4 failures).
func windowBatch(names, states []string, interval time.Duration, now int64) protocol.Batch {
	b := protocol.Batch{Type: protocol.TypeBatch, SentAt: now, Windows: make([]protocol.Window, len(names))}
	for i, n := range names {
		ok := 80 + rand.Int64N(40)
		failed := rand.Int64N(5)
		lat := make([]int64, protocol.NumLatencyBuckets)
		lat[3], lat[4], lat[6] = ok/2, ok-ok/2, failed
		b.Windows[i] = protocol.Window{
			Breaker: n, Start: now - interval.Milliseconds(), Millis: max(1, interval.Milliseconds()),
			State: states[i], InFlight: rand.Int64N(4), Latency: lat, LatencySumMs: float64(ok*12 + failed*80),
			Counts:   protocol.Counts{Admitted: ok + failed, Successes: ok, Failures: failed, Errors: failed},
			Headroom: protocol.Headroom{Calls: 100, Failures: failed * 2, MinimumCalls: 20, FailureRate: float64(failed * 2), FailureRateThreshold: 50},
		}
	}
	return b
}

func (a *agent) sendTransition(ctx context.Context) error {
	i := rand.IntN(len(a.names))
	from := a.states[i]
	to, kind := protocol.StateOpen, protocol.CauseFailureRate
	if from == protocol.StateOpen {
		to, kind = protocol.StateClosed, protocol.CauseProbesSucceeded
	}
	a.states[i] = to
	a.gens[i]++
	at, stamp := time.Now(), a.r.cfg.Clock.Now() // real time for the latency, the clock's on the wire
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: a.next(0), SentAt: stamp.UnixMilli(), Transitions: []protocol.Transition{{
		Breaker: a.names[i], From: from, To: to, At: stamp.UnixMilli(), Generation: a.gens[i],
		Cause: protocol.Cause{Kind: kind, FailureRate: 55, Threshold: 50, WindowCalls: 100, WindowFailed: 55},
	}}}
	a.r.sentAt(key(a.instance, a.names[i], a.gens[i]), at)
	return a.write(ctx, b)
}

func key(instance, breaker string, gen uint64) string {
	return fmt.Sprintf("%s/%s/%d", instance, breaker, gen)
}

// readLoop counts acknowledged window reports (acks are cumulative) and
// refusals.
func (a *agent) readLoop(ctx context.Context) {
	for {
		_, data, err := a.conn.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.r.errors.Add(1)
			}
			return
		}
		var m struct {
			Type string `json:"type"`
			Seq  uint64 `json:"seq"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch m.Type {
		case protocol.TypeAck:
			n := 0
			a.mu.Lock()
			for seq, w := range a.windows {
				if seq <= m.Seq {
					n += w
					delete(a.windows, seq)
				}
			}
			a.mu.Unlock()
			if a.r.measuring.Load() {
				a.r.windows.Add(int64(n))
				a.r.perServer[a.server].Add(int64(n))
			}
		case protocol.TypeError:
			a.r.refused.Add(1)
		}
	}
}
