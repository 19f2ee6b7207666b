package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Several collectors, one fleet. A collector keeps every line of the
// instances it serves and, of the others', one summary per dependency and
// serving collector (internal/live's summary.go), so that its live work
// grows with its share of the fleet plus the number of dependencies. On
// the bus (Config.Cluster), in the compact form of fleetwire.go, it
// publishes about once a second its summaries that changed (every one
// every summaryFullEvery), each transition of its instances at once, and
// a claim at each hello (the others forget the lines they held of that
// instance, and take it out of the claimer's summary when it says hello
// to them later: live's moved.go). The dependencies a quorum rule turns on keep the earlier
// scheme, every member's line everywhere (the leader's advisor reads
// them): their breakers' part of each hello and validated batch is
// published and applied by the others as their own agents' (an instance
// connected here is never changed by another collector's updates). Pages
// that list members served elsewhere read them from the store
// (Collector.Members). Holds are stored
// desired state: a collector that creates or releases one says so on the
// bus and every collector applies it to the instances connected to it. A
// command for an instance connected elsewhere is routed to that collector
// (cluster.Route); its result is stored by the collector the agent
// answers, once. Compaction runs on the leader of "compaction" only.
//
// NOTIFY is not durable: when the bus says messages may have been missed
// (a gap), the collector reads the instances' last state and the live
// holds from the store again: the store's states stand for the other
// collectors' summaries until their next full round (live.StoreHold).

// Channels of the bus.
const (
	chanLive  = "live"  // fleetUpdate arrays
	chanHolds = "holds" // a hold id that was created or released
	chanCmd   = "cmd"   // a routedCommand to an instance connected to the receiver
)

// fleetQueue bounds the encoded updates waiting to be published; when it
// is full, updates are dropped (counted), never waited for.
const fleetQueue = 8192

// fleetPayload is the size the publisher packs updates up to, as the bus
// will send it (escaped as a JSON string, see notifySize), under NOTIFY's
// limit of 8000 bytes with room for the envelope, so they go inline.
const fleetPayload = 7800

// notifySize is the size of update d (encoding/json's output, which has
// no raw control or HTML characters) once escaped in the bus's envelope,
// a JSON string: a quote or a backslash takes two bytes.
func notifySize(d []byte) int {
	return len(d) + bytes.Count(d, []byte{'"'}) + bytes.Count(d, []byte{'\\'})
}

// summaryEvery is how often a collector publishes its summaries that
// changed; summaryFullEvery how often every one (a collector that joins,
// or missed one, has them all by then; live.RemoteExpiry drops a
// collector's summaries not renewed for a few of these).
const (
	summaryEvery     = time.Second
	summaryFullEvery = 5 * time.Second
)

// resyncEvery bounds how often a collector resynchronises from the store
// after gaps.
const resyncEvery = time.Second

// fleet is a collector's side of the bus.
type fleet struct {
	c    *Collector
	bus  cluster.Bus
	solo bool // a Local bus: nothing is published

	out       chan []byte
	budget    fleetBudget // bytes in out (fleetbudget.go)
	dropped   atomic.Int64
	published atomic.Int64 // updates
	received  atomic.Int64 // other collectors' updates
	resyncs   atomic.Int64 // live state read from the store after a gap
	started   sync.Map     // instKey -> int64: the started_at of its last hello here

	compacting atomic.Bool // this collector leads "compaction"
	fg         forgetWire  // breaker rows a hello deleted (forgetwire.go)

	// full names the dependencies whose members' lines every collector
	// keeps (live.Config.FullDetail); nil: none.
	full func(cbdash.DependencyKey) bool

	pubMu     sync.Mutex
	pubFailed bool // the last publish failed (logged once until one succeeds)
}

func newFleet(c *Collector, bus cluster.Bus, full func(cbdash.DependencyKey) bool) *fleet {
	_, solo := bus.(*cluster.Local)
	return &fleet{c: c, bus: bus, solo: solo, out: make(chan []byte, fleetQueue), full: full}
}

// routedCommand is a command sent to the collector an instance is
// connected to.
type routedCommand struct {
	Service  string           `json:"s"`
	Instance string           `json:"i"`
	Command  protocol.Command `json:"c"`
}

// peered is a bus that knows whether other collectors listen (a
// collector alone on its database then publishes nothing: one that joins
// reads the store at its start).
type peered interface{ Peers() int }

// peerLister is a bus that names the other nodes listening
// (cluster.Postgres).
type peerLister interface{ PeerIDs() ([]string, bool) }

// peerIDs lists the other collectors listening on the bus; ok is false
// when not known (or the bus cannot tell).
func (f *fleet) peerIDs() (ids []string, ok bool) {
	p, can := f.bus.(peerLister)
	if !can {
		return nil, false
	}
	return p.PeerIDs()
}

// alone reports whether no other collector listens on the bus.
func (f *fleet) alone() bool {
	if f.solo {
		return true
	}
	p, ok := f.bus.(peered)
	return ok && p.Peers() == 0
}

// enqueue queues an update for the publisher without blocking.
func (f *fleet) enqueue(u fleetUpdate) {
	if f.alone() {
		return
	}
	data, err := json.Marshal(u)
	if err != nil {
		f.c.log.Error("encode fleet update", "err", err)
		return
	}
	if !f.budget.reserve(len(data)) {
		f.dropped.Add(1)
		return
	}
	select {
	case f.out <- data:
	default:
		f.budget.release(len(data))
		f.dropped.Add(1)
	}
}

// register exports the fleet's counters.
func (f *fleet) register(r prometheus.Registerer) error {
	for _, m := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{"cbdash_collector_fleet_updates_published_total", "Live updates (an instance's hello or batch) published to the other collectors.", &f.published},
		{"cbdash_collector_fleet_updates_dropped_total", "Live updates not published because the queue to the bus was full (the other collectors' views miss them).", &f.dropped},
		{"cbdash_collector_fleet_updates_received_total", "Other collectors' live updates received (applied unless the instance is connected here).", &f.received},
	} {
		v := m.v
		if err := r.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
			func() float64 { return float64(v.Load()) })); err != nil {
			return err
		}
	}
	return nil
}

// hello publishes an instance's hello (last: its last stored seq) and,
// for a websocket session, claims the instance for this collector so that
// commands for it are routed here.
func (f *fleet) hello(ctx context.Context, h *protocol.Hello, last uint64, at time.Time, connected bool) {
	if connected {
		if err := f.bus.Claim(ctx, h.Service, h.Instance); err != nil && ctx.Err() == nil {
			f.c.log.Warn("claim instance on the bus: commands from other collectors wait for its next hello",
				"service", h.Service, "instance", h.Instance, "err", err)
		}
	}
	f.started.Store(instKey{h.Service, h.Instance}, h.StartedAt)
	if !f.alone() {
		f.enqueue(fleetUpdate{V: wireVersion, Kind: updClaim, Service: h.Service, Instance: h.Instance})
		f.seed(ctx, h.Service, h.Instance)
	}
	if fh := f.fullHello(h); fh != nil {
		f.enqueue(fleetUpdate{V: wireVersion, Kind: updHello, Service: h.Service, Instance: h.Instance, StartedAt: h.StartedAt,
			Seq: last, At: at.UnixMilli(), Hello: fh})
	}
}

// seed shows an instance that said hello here in its stored state until
// its first report (live.State.Seed): one that moved from another
// collector keeps its state (open, say) rather than show closed for a
// moment while the summary that counted it there goes.
func (f *fleet) seed(ctx context.Context, service, instance string) {
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	ibs, err := f.c.store.InstanceLines(ctx, service, instance)
	if err != nil {
		if ctx.Err() == nil {
			f.c.log.Info("an instance's stored state before its first report here: not read", "service", service, "instance", instance, "err", err)
		}
		return
	}
	f.c.live.Seed(ibs)
}

// fullHello is h with only the breakers of the dependencies kept line by
// line (f.full); nil when it has none.
func (f *fleet) fullHello(h *protocol.Hello) *protocol.Hello {
	if f.full == nil {
		return nil
	}
	var bs []protocol.BreakerConfig
	for _, b := range h.Breakers {
		if f.full(cbdash.DependencyKey{Service: h.Service, Breaker: b.Name}) {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return nil
	}
	fh := *h
	fh.Breakers = bs
	return &fh
}

// batch publishes a validated batch as it is applied here: its
// transitions at once, and, of the dependencies kept line by line, the
// batch itself.
func (f *fleet) batch(r live.Update) {
	if f.alone() {
		return
	}
	started, ok := f.started.Load(instKey{r.Key.Service, r.Key.Instance})
	if !ok {
		return
	}
	b := r.Batch
	if f.full == nil {
		return // its transitions go as live applies them (transitions)
	}
	var full protocol.Batch
	for _, t := range b.Transitions {
		if f.isFull(r.Key.Service, t.Breaker) {
			full.Transitions = append(full.Transitions, t)
		}
	}
	for _, w := range b.Windows {
		if f.isFull(r.Key.Service, w.Breaker) {
			full.Windows = append(full.Windows, w)
		}
	}
	if len(full.Transitions)+len(full.Windows) > 0 {
		full.Type, full.Seq, full.SentAt = b.Type, b.Seq, b.SentAt
		fr := r
		fr.Batch = &full
		f.enqueue(batchUpdate(fr, started.(int64)))
	}
}

// transitions publishes the transitions ts of instance k served here,
// received at at, as live state applies them (live.Config.Applied, under
// its lock): in one order with the summaries (summaryLoop), so a summary
// built before their apply is sent before them. A dependency a quorum
// rule turns on sends its transitions with its batches (batch).
func (f *fleet) transitions(k live.Key, ts []protocol.Transition, at time.Time) {
	if f.alone() {
		return
	}
	if _, ok := f.started.Load(instKey{k.Service, k.Instance}); !ok {
		return
	}
	var trans []protocol.Transition
	for _, t := range ts {
		if !f.isFull(k.Service, t.Breaker) {
			trans = append(trans, t)
		}
	}
	if len(trans) > 0 {
		f.enqueue(fleetUpdate{V: wireVersion, Kind: updTrans, Service: k.Service, Instance: k.Instance,
			At: at.UnixMilli(), Trans: trans})
	}
}

func (f *fleet) isFull(service, breaker string) bool {
	return f.full != nil && f.full(cbdash.DependencyKey{Service: service, Breaker: breaker})
}

// summaryLoop publishes this collector's summaries that changed every
// summaryEvery, and every one every summaryFullEvery.
func (f *fleet) summaryLoop(ctx context.Context) {
	tick, stop := f.c.clk.NewTicker(summaryEvery)
	defer stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if ids, ok := f.peerIDs(); ok {
			f.c.live.KeepSources(ids, summaryEvery+time.Second)
		}
		if f.alone() {
			continue
		}
		n++
		all := n%int(summaryFullEvery/summaryEvery) == 1
		// Enqueued under live's lock, in one order with the transitions
		// (transitions): a summary built before a transition's apply is
		// sent before it, so the others never have it undo the move.
		f.c.live.PublishSummaries(all, func(ss []live.Summary) {
			for _, s := range ss {
				f.enqueue(summaryUpdate(s))
			}
		})
	}
}

// disconnected releases the claim of an instance whose last session here
// ended.
func (f *fleet) disconnected(k instKey) {
	if f.c.live.ConnOf(k.key()) != nil {
		return // a newer session of it is here
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.bus.Release(ctx, k.service, k.instance); err != nil && !errors.Is(err, cluster.ErrClosed) {
		f.c.log.Info("release instance on the bus", "service", k.service, "instance", k.instance, "err", err)
	}
}

// route sends wire to the targets of a command that are not connected
// here; an instance no collector holds gets it from the store at its next
// hello.
func (f *fleet) route(ctx context.Context, service string, targets []string, wire protocol.Command) {
	for _, inst := range targets {
		if f.c.live.ConnOf(live.Key{Service: service, Instance: inst}) != nil {
			continue
		}
		p, err := json.Marshal(routedCommand{Service: service, Instance: inst, Command: wire})
		if err != nil {
			continue
		}
		err = f.bus.Route(ctx, chanCmd, service, inst, p)
		if err != nil && !errors.Is(err, cluster.ErrNoRoute) {
			f.c.log.Warn("route command", "id", wire.ID, "service", service, "instance", inst, "err", err)
		}
	}
}

// holdChanged tells the other collectors that hold id was created or
// released.
func (f *fleet) holdChanged(ctx context.Context, id string) {
	if f.solo {
		return
	}
	if err := f.bus.Publish(ctx, chanHolds, []byte(id)); err != nil {
		f.c.log.Warn("publish hold change: other collectors apply it at their next gap or hello", "hold", id, "err", err)
	}
}

// leadsCompaction reports whether this collector runs compaction now.
func (f *fleet) leadsCompaction() bool { return f.solo || f.compacting.Load() }

// run runs the publisher, the subscribers and the compaction leadership
// until ctx ends, and returns once they have stopped.
func (f *fleet) run(ctx context.Context) {
	var wg sync.WaitGroup
	start := func(fn func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
		}()
	}
	start(f.publishLoop)
	start(f.summaryLoop)
	start(func(ctx context.Context) {
		f.seedClaims(ctx)
		f.subscribe(ctx, chanLive, f.applyLive, f.resyncLive)
	})
	start(func(ctx context.Context) { f.subscribe(ctx, chanHolds, f.applyHold, f.resyncHolds) })
	start(func(ctx context.Context) { f.subscribe(ctx, chanCmd, f.applyCommand, nil) })
	start(f.runForgets)
	start(func(ctx context.Context) {
		_ = f.bus.Lead(ctx, "compaction", func(lctx context.Context) {
			f.compacting.Store(true)
			<-lctx.Done()
			f.compacting.Store(false)
		})
	})
	wg.Wait()
}

// publishLoop packs queued updates into messages of up to fleetPayload
// bytes and publishes them, in order.
func (f *fleet) publishLoop(ctx context.Context) {
	buf := make([]byte, 0, fleetPayload+1024)
	for {
		var first []byte
		select {
		case <-ctx.Done():
			return
		case first = <-f.out:
			f.budget.release(len(first))
		}
		n, size := 1, 2+notifySize(first)
		buf = append(append(buf[:0], '['), first...)
	pack:
		for size < fleetPayload {
			select {
			case d := <-f.out:
				f.budget.release(len(d))
				ds := notifySize(d)
				if size+ds+1 > fleetPayload {
					f.publish(ctx, append(buf, ']'), n)
					buf, n, size = append(append(buf[:0], '['), d...), 1, 2+ds
					continue
				}
				buf = append(append(buf, ','), d...)
				n, size = n+1, size+ds+1
			default:
				break pack
			}
		}
		f.publish(ctx, append(buf, ']'), n)
	}
}

// publish publishes p, a JSON array of n updates.
func (f *fleet) publish(ctx context.Context, p []byte, n int) {
	err := f.bus.Publish(ctx, chanLive, p)
	if err == nil {
		f.published.Add(int64(n))
	}
	f.pubMu.Lock()
	defer f.pubMu.Unlock()
	switch {
	case err == nil && f.pubFailed:
		f.pubFailed = false
		f.c.log.Info("publishing live updates on the bus again")
	case err != nil && !f.pubFailed && ctx.Err() == nil:
		f.pubFailed = true
		f.c.log.Warn("publish live updates on the bus: other collectors miss them until it succeeds", "err", err)
	}
}

// subscribe delivers the messages of channel to apply until ctx ends; a
// gap, or being dropped for falling behind, runs resync (nil: nothing to
// do), at most every resyncEvery.
func (f *fleet) subscribe(ctx context.Context, channel string, apply func(context.Context, cluster.Message), resync func(context.Context)) {
	var last time.Time
	gap := func() {
		if resync == nil {
			return
		}
		if wait := resyncEvery - f.c.now().Sub(last); wait > 0 && !f.pause(ctx, wait) {
			return
		}
		last = f.c.now()
		resync(ctx)
	}
	for ctx.Err() == nil {
		msgs, cancel := f.bus.Subscribe(channel)
		for open := true; open; {
			select {
			case <-ctx.Done():
				cancel()
				return
			case m, ok := <-msgs:
				switch {
				case !ok:
					open = false
				case m.Gap:
					gap()
				default:
					apply(ctx, m)
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		// Dropped for falling behind (or the bus closed): subscribe again
		// after a pause, then read what was missed.
		f.c.log.Info("fell behind the bus; reading the fleet from the store again", "channel", channel)
		last = time.Time{}
		if !f.pause(ctx, resyncEvery) {
			return
		}
		if resync != nil {
			resync(ctx)
		}
	}
}

// pause waits d on the collector's clock; false when ctx ended first.
func (f *fleet) pause(ctx context.Context, d time.Duration) bool {
	t := clock.NewTimer(f.c.clk, d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (f *fleet) applyLive(_ context.Context, m cluster.Message) {
	us, err := decodeUpdates(m.Payload)
	if err != nil {
		f.c.log.Warn("a fleet update from another collector is unreadable", "from", m.From, "err", err)
		return
	}
	for i := range us {
		f.apply(m.From, &us[i])
	}
	f.received.Add(int64(len(us)))
}

// apply applies collector from's update u to live state (an instance
// connected here keeps its own reports); a kind it does not know (a
// later build's) is ignored.
func (f *fleet) apply(from string, u *fleetUpdate) {
	k, at := live.Key{Service: u.Service, Instance: u.Instance}, time.UnixMilli(u.At).UTC()
	switch u.Kind {
	case updHello:
		f.c.live.RemoteHello(k, u.StartedAt, u.Seq, at, u.Hello)
	case updBatch:
		f.c.live.RemoteBatch(k, u.StartedAt, u.batch(), at, u.Skew)
	case updTrans:
		f.c.live.RemoteTransitions(from, k, u.Trans, at)
	case updSummary:
		if u.Summary != nil {
			f.c.live.ApplySummary(from, u.summary())
		}
	case updClaim:
		f.c.live.RemoteClaim(from, k)
	}
}

func (f *fleet) resyncLive(ctx context.Context) {
	ibs, err := f.c.store.Instances(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.c.log.Info("resynchronise live state from the store after a gap on the bus: not now", "err", err)
		}
		return
	}
	if f.full != nil {
		var lines []cbdash.InstanceBreaker
		for _, r := range ibs {
			if f.isFull(r.Service, r.Breaker) {
				lines = append(lines, r)
			}
		}
		f.c.live.Resync(lines)
	}
	f.c.live.ResyncSummaries(ibs)
	f.seedClaims(ctx)
	f.resyncs.Add(1)
}

// seedClaims tells live state which collector holds each instance
// connected elsewhere (cluster.Bus.Claims): the claims made while this
// collector was down or missed messages, so that an instance that moves
// here from one is counted once (live.SeedClaims).
func (f *fleet) seedClaims(ctx context.Context) {
	if f.solo {
		return
	}
	cs, err := f.bus.Claims(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.c.log.Info("read the other collectors' claims: not now", "err", err)
		}
		return
	}
	m := make(map[live.Key]string, len(cs))
	for _, c := range cs {
		if c.Node != f.bus.NodeID() {
			m[live.Key{Service: c.Service, Instance: c.Instance}] = c.Node
		}
	}
	f.c.live.SeedClaims(m)
}

func (f *fleet) applyCommand(_ context.Context, m cluster.Message) {
	var rc routedCommand
	if err := json.Unmarshal(m.Payload, &rc); err != nil {
		f.c.log.Warn("a routed command is unreadable", "from", m.From, "err", err)
		return
	}
	if s := f.c.live.ConnOf(live.Key{Service: rc.Service, Instance: rc.Instance}); s != nil {
		s.Send(rc.Command)
	}
}

// applyHold reads a hold another collector created or released and
// applies it to the instances connected here.
func (f *fleet) applyHold(ctx context.Context, m cluster.Message) {
	h, err := f.c.store.Hold(ctx, string(m.Payload))
	if err != nil {
		if ctx.Err() == nil {
			f.c.log.Info("read a hold another collector changed", "hold", string(m.Payload), "err", err)
		}
		return
	}
	f.c.holds.adopt(ctx, []cbdash.HoldRecord{h})
}

func (f *fleet) resyncHolds(ctx context.Context) {
	hs, err := f.c.store.Holds(ctx, cbdash.HoldQuery{LiveAt: f.c.now().UTC(), Limit: 5000})
	if err != nil {
		if ctx.Err() == nil {
			f.c.log.Info("resynchronise holds from the store after a gap on the bus: not now", "err", err)
		}
		return
	}
	f.c.holds.adopt(ctx, hs)
}

// startFleet runs the collector's side of the bus until the returned
// function is called (it waits for it to stop).
func (c *Collector) startFleet(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fleet.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// fullDetail names the dependencies every collector keeps the lines of
// (live.Config.FullDetail): those a quorum rule turns on, whose advisor,
// on the leader, reads every member's line. Nil without rules.
func fullDetail(rules []cbdash.QuorumRule) func(cbdash.DependencyKey) bool {
	if len(rules) == 0 {
		return nil
	}
	return func(k cbdash.DependencyKey) bool {
		_, on := cbdash.QuorumRuleFor(rules, k)
		return on
	}
}
