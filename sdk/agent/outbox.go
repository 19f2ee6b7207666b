package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// item is one upstream record waiting for a batch: exactly one of t, w, r
// is set. size is its encoded JSON size, the unit of the buffer bound.
// hello is the hello generation that declares its breaker: it may only go
// out on a connection that has sent that hello.
type item struct {
	t     *protocol.Transition
	w     *protocol.Window
	r     *protocol.CommandResult
	size  int
	hello uint64
}

func newItem(t *protocol.Transition, w *protocol.Window, r *protocol.CommandResult) item {
	var v any
	switch {
	case t != nil:
		v = t
	case w != nil:
		v = w
	default:
		v = r
	}
	data, _ := json.Marshal(v) // plain structs of numbers and strings cannot fail
	return item{t: t, w: w, r: r, size: len(data) + 1}
}

// breaker returns the name of the breaker a transition or window report
// is about, "" for a command result (which the collector does not check
// against the hello).
func (it item) breaker() string {
	switch {
	case it.t != nil:
		return it.t.Breaker
	case it.w != nil:
		return it.w.Breaker
	}
	return ""
}

func (it item) declaredBy(hello uint64) item {
	it.hello = hello
	return it
}

// sentBatch is a sequenced, encoded batch that the collector has not
// acknowledged yet.
type sentBatch struct {
	seq      uint64
	data     []byte
	breakers []string // the breakers its transitions and windows are about, each once
}

// batchOverhead bounds the JSON around the items of a batch (type, seq,
// sent_at, array brackets, dropped counts).
const batchOverhead = 512

// outbox holds everything the agent has to say and has not had
// acknowledged, within a byte bound. Pending items are not sequenced yet;
// in-flight batches are sequenced and encoded, and are resent verbatim
// after a reconnect until acknowledged.
//
// The bound is split: in-flight batches may use half of it (new batches
// are not formed beyond that), pending items the rest. When pending items
// overflow, the agent loses resolution before it loses counts: the oldest
// window reports are merged into the next report of the same breaker
// (counts and histograms kept exactly), down to one report per breaker
// (per hour of reports). Only when even that does not fit are the oldest
// window reports dropped, each counted with its calls and the time it
// covered (Dropped.Calls and Dropped.Lost, a span per breaker), and only
// then the oldest transitions and command results. Everything dropped is
// counted and reported in the next batch's Dropped; the lost spans waiting
// for it count against the bound.
//
// An outbox is safe for concurrent use.
type outbox struct {
	limit    int // bytes
	maxBatch int // bytes per batch

	mu            sync.Mutex
	pending       []item
	pendingBytes  int
	inflight      []sentBatch
	inflightBytes int
	cursor        int // index into inflight of the next batch to write on this connection
	nextSeq       uint64
	unreported    protocol.Dropped // dropped since the last batch formed
	lostBytes     int              // encoded size of unreported.Lost
	total         protocol.Dropped // dropped since the start (without Lost spans)
	sent, acked   uint64
	drained       chan struct{} // closed when draining and empty; nil until draining
	progress      time.Time     // wall time of the last ack, or of the first write after none was unacked
}

func newOutbox(limit int) *outbox {
	maxBatch := min(protocol.MaxMessageBytes, limit/2) - batchOverhead
	return &outbox{limit: limit, maxBatch: maxBatch, nextSeq: 1}
}

// add appends items in order and enforces the bound.
func (o *outbox) add(items ...item) {
	if len(items) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, it := range items {
		o.pending = append(o.pending, it)
		o.pendingBytes += it.size
	}
	o.compact()
}

// countDropped records items lost before they reached the outbox.
func (o *outbox) countDropped(d protocol.Dropped) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.countLocked(d)
}

// countLocked adds counts of drops (not lost spans, see lose) to the
// unreported and the total counts.
func (o *outbox) countLocked(d protocol.Dropped) {
	d.Lost = nil
	o.unreported.Add(d)
	o.total.Add(d)
}

// held is what pending items and unreported lost spans take of the bound.
func (o *outbox) held() int { return o.pendingBytes + o.lostBytes }

// compact brings pending items within their share of the bound.
func (o *outbox) compact() {
	budget := o.limit - o.inflightBytes
	if o.held() <= budget {
		return
	}
	var d protocol.Dropped
	o.mergeOldestWindows(budget, &d)
	o.dropOldest(budget, &d, func(it item) bool { return it.w != nil })
	o.dropOldest(budget, &d, func(item) bool { return true })
	o.countLocked(d)
}

// mergeOldestWindows folds, oldest first, a window report into the next
// report of the same breaker until pending fits in budget.
func (o *outbox) mergeOldestWindows(budget int, d *protocol.Dropped) {
	removed := make([]bool, len(o.pending))
	last := map[string]int{} // breaker -> index of its latest kept window so far
	for i := range o.pending {
		if o.held() <= budget {
			break
		}
		w := o.pending[i].w
		if w == nil {
			continue
		}
		if j, ok := last[w.Breaker]; ok && w.Start+w.Millis-o.pending[j].w.Start <= protocol.MaxWindowMillis {
			merged := mergeWindows(*o.pending[j].w, *w)
			o.pendingBytes -= o.pending[j].size + o.pending[i].size
			o.pending[i] = newItem(nil, &merged, nil).declaredBy(max(o.pending[i].hello, o.pending[j].hello))
			o.pendingBytes += o.pending[i].size
			removed[j] = true
			d.Merged++
		}
		last[w.Breaker] = i
	}
	o.removeMarked(removed)
}

// dropOldest removes the oldest items matching pick until pending fits.
func (o *outbox) dropOldest(budget int, d *protocol.Dropped, pick func(item) bool) {
	removed := make([]bool, len(o.pending))
	for i, it := range o.pending {
		if o.held() <= budget {
			break
		}
		if !pick(it) {
			continue
		}
		removed[i] = true
		o.pendingBytes -= it.size
		switch {
		case it.w != nil:
			d.Windows++
			d.Calls = protocol.SatAdd(d.Calls, windowCalls(it.w))
			o.lose(it.w)
		case it.t != nil:
			d.Transitions++
		default:
			d.CommandResults++
		}
	}
	o.removeMarked(removed)
}

func (o *outbox) removeMarked(removed []bool) {
	kept := o.pending[:0]
	for i, it := range o.pending {
		if !removed[i] {
			kept = append(kept, it)
		}
	}
	clear(o.pending[len(kept):])
	o.pending = kept
}

// mergeWindows returns one report covering a (older) and b (newer): counts
// and histograms add up, the state, in-flight calls and headroom are b's.
func mergeWindows(a, b protocol.Window) protocol.Window {
	m := b
	m.Start = a.Start
	m.Millis = b.Start + b.Millis - a.Start
	m.Counts = a.Counts
	m.Counts.Add(b.Counts)
	m.LatencySumMs = a.LatencySumMs + b.LatencySumMs
	switch {
	case len(a.Latency) == 0:
		m.Latency = b.Latency
	case len(b.Latency) == 0:
		m.Latency = a.Latency
	default:
		m.Latency = make([]int64, len(a.Latency))
		for i := range a.Latency {
			m.Latency[i] = a.Latency[i] + b.Latency[i]
		}
	}
	return m
}

// next returns the next batch to write on the current connection, which
// has declared the breakers of hello generation hello: an in-flight batch
// not yet written on it, or a new batch formed from pending items. ok is
// false when there is nothing to send, when in-flight batches fill their
// share of the bound, or when the next item needs a newer hello (then
// needHello is true).
func (o *outbox) next(sentAt int64, hello uint64) (seq uint64, data []byte, ok, needHello bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cursor == 0 || len(o.inflight) == 0 {
		o.progress = time.Now() // the collector's time to answer starts now
	}
	if o.cursor < len(o.inflight) {
		b := o.inflight[o.cursor]
		o.cursor++
		o.sent++
		return b.seq, b.data, true, false
	}
	room := min(o.maxBatch, o.limit/2-o.inflightBytes-batchOverhead)
	if len(o.inflight) == 0 {
		room = max(room, o.lostBytes) // lost spans always go out, if alone
	}
	room -= o.lostBytes // the batch's dropped carries them
	lost := len(o.unreported.Lost) > 0 && room >= 0
	if !lost && (len(o.pending) == 0 || o.pending[0].size > room) {
		return 0, nil, false, false
	}
	if !lost && o.pending[0].hello > hello {
		return 0, nil, false, true
	}
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: o.nextSeq, SentAt: sentAt}
	n, size := 0, 0
fill:
	for _, it := range o.pending {
		if size+it.size > room || it.hello > hello {
			break fill
		}
		switch {
		case it.t != nil && it.t.Shadow != "":
			if len(b.ShadowTransitions) == protocol.MaxTransitions {
				break fill
			}
			b.ShadowTransitions = append(b.ShadowTransitions, *it.t)
		case it.t != nil:
			if len(b.Transitions) == protocol.MaxTransitions {
				break fill
			}
			b.Transitions = append(b.Transitions, *it.t)
		case it.w != nil:
			if len(b.Windows) == protocol.MaxWindows {
				break fill
			}
			b.Windows = append(b.Windows, *it.w)
		default:
			if len(b.CommandResults) == protocol.MaxCommandResults {
				break fill
			}
			b.CommandResults = append(b.CommandResults, *it.r)
		}
		n++
		size += it.size
	}
	if !o.unreported.IsZero() {
		d := o.unreported
		b.Dropped = &d
		o.unreported = protocol.Dropped{}
		o.lostBytes = 0
	}
	data, err := json.Marshal(&b)
	if err != nil {
		panic(fmt.Sprintf("agent: encoding a batch: %v", err)) // plain structs: cannot happen
	}
	var names []string
	for _, it := range o.pending[:n] {
		if name := it.breaker(); name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	clear(o.pending[:n])
	o.pending = o.pending[n:]
	o.pendingBytes -= size
	o.inflight = append(o.inflight, sentBatch{seq: b.Seq, data: data, breakers: names})
	o.inflightBytes += len(data)
	o.cursor = len(o.inflight)
	o.nextSeq++
	o.sent++
	o.compact() // the batch's envelope took a little more than its items
	return b.Seq, data, true, false
}

// mentions reports whether a pending item or an unacknowledged batch is
// about the breaker called name.
func (o *outbox) mentions(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, it := range o.pending {
		if it.breaker() == name {
			return true
		}
	}
	for _, b := range o.inflight {
		if slices.Contains(b.breakers, name) {
			return true
		}
	}
	return false
}

// welcome starts a new connection on which the collector has stored
// every batch up to lastSeq: those are forgotten, the rest will be
// resent in order. It reports whether lastSeq is ahead of anything this
// agent sent (then the agent skips its sequence ahead so that its next
// batches are not taken for duplicates).
func (o *outbox) welcome(lastSeq uint64) (ahead bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ackLocked(lastSeq)
	o.cursor = 0
	if lastSeq >= o.nextSeq {
		o.nextSeq = lastSeq + 1
		return true
	}
	return false
}

// ack forgets every in-flight batch with a sequence number <= seq.
func (o *outbox) ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ackLocked(seq)
}

func (o *outbox) ackLocked(seq uint64) {
	n := 0
	for n < len(o.inflight) && o.inflight[n].seq <= seq {
		o.inflightBytes -= len(o.inflight[n].data)
		n++
	}
	o.acked += uint64(n)
	if n > 0 {
		o.progress = time.Now()
	}
	o.removeInflight(0, n)
	o.checkDrained()
}

// refuse forgets the in-flight batch seq, which the collector will never
// store, and counts it. It reports whether seq was in flight.
func (o *outbox) refuse(seq uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, b := range o.inflight {
		if b.seq == seq {
			o.inflightBytes -= len(b.data)
			o.removeInflight(i, i+1)
			o.countLocked(protocol.Dropped{Batches: 1})
			o.checkDrained()
			return true
		}
	}
	return false
}

func (o *outbox) removeInflight(i, j int) {
	if i == j {
		return
	}
	o.inflight = append(o.inflight[:i], o.inflight[j:]...)
	switch {
	case o.cursor >= j:
		o.cursor -= j - i
	case o.cursor > i:
		o.cursor = i
	}
}

// unackedSince returns since when the collector owes an acknowledgement
// for a batch written on this connection; ok is false when it owes none.
func (o *outbox) unackedSince() (since time.Time, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.progress, o.cursor > 0
}

// drain returns a channel closed once nothing is pending or in flight.
func (o *outbox) drain() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.drained == nil {
		o.drained = make(chan struct{})
		o.checkDrained()
	}
	return o.drained
}

func (o *outbox) checkDrained() {
	if o.drained == nil || len(o.pending) > 0 || len(o.inflight) > 0 || len(o.unreported.Lost) > 0 {
		return
	}
	select {
	case <-o.drained:
	default:
		close(o.drained)
	}
}

// outboxStats is a consistent copy of the outbox's counters.
type outboxStats struct {
	sent, acked     uint64
	dropped         protocol.Dropped
	bytes           int
	pending, unsent int // items not in a batch; in-flight batches
}

func (o *outbox) stats() outboxStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return outboxStats{
		sent: o.sent, acked: o.acked, dropped: o.total,
		bytes:   o.held() + o.inflightBytes,
		pending: len(o.pending), unsent: len(o.inflight),
	}
}
